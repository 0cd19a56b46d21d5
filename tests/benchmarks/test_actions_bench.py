"""benchmarks/actions.py on one conversation of each kind and every scripted task: it runs, and every
task's end state of the shop is the expected one."""

from __future__ import annotations

from tests.benchmarks.test_smoke import run_script


def test_actions_benchmark_smoke() -> None:
    out = run_script("benchmarks.actions", "--conversations", "1", within=400)
    assert "end states exact" in out and "FAIL" not in out and "RESULT: OK" in out, out
