"""Every benchmark script runs on tiny sizes, so none of them can rot."""

from __future__ import annotations

import importlib.util
import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_script(module: str, *args: str, within: float = 240) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=within
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout


@pytest.mark.redis
def test_chaos_script_smoke() -> None:
    out = run_script(
        "benchmarks.chaos",
        "--chats",
        "12",
        "--messages",
        "4",
        "--kill-every-waves",
        "1",
        "--workers",
        "2",
        "--lease",
        "2",
        "--timeout",
        "90",
        "--no-provider-faults",
    )
    assert "lost=0 doubled=0 out_of_order=0 stuck_chats=0 resurrected_after_forget=0" in out
    assert "lease_lost=0" in out and "kills=1 pauses=1 redis_stalls=1 redis_restarts=1" in out
    assert "RESULT: OK" in out


def test_chaos_script_with_provider_faults() -> None:
    """Behind the fault proxy (cut answers, malformed chunks and bodies, 429s with Retry-After, an
    outage past the give-up time), with one worker streaming and one not: no cut answer is delivered
    or stored, no message ends in silence, no retry comes before its Retry-After."""
    args = ["--chats", "8", "--messages", "4", "--workers", "2", "--kill-every-waves", "0", "--no-redis-restart"]
    args += ["--lease", "2", "--give-up", "2", "--storm", "1.5", "--seed", "2", "--timeout", "60"]
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.chaos", *args], cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    out = completed.stdout + completed.stderr
    faults = re.search(r"provider faults: (\{.*\})", out)
    assert faults is not None, out
    assert all(f"'{kind}'" in faults.group(1) for kind in ("no_finish", "cut", "malformed", "rate_limited", "outage"))
    figures = dict(re.findall(r"(\w+)=(\d+)", out.split("provider faults:", 1)[1].splitlines()[1]))
    assert int(figures["given_up"]) > 0, "the outage outlasted the give-up time"
    must_be_0 = ("truncated_delivered", "truncated_stored", "ended_in_silence", "unresolved", "lost")
    assert [name for name in (*must_be_0, "retries_before_retry_after") if figures[name] != "0"] == [], out
    assert int(figures["max"]) <= 10, "model requests per question are capped (LLM_MAX_REQUESTS_PER_QUESTION)"
    assert "lost=0 doubled=0 out_of_order=0 stuck_chats=0" in out and "lease_lost=0" in out, out
    assert "RESULT: OK" in out and completed.returncode == 0, out


def test_window_benchmark_smoke() -> None:
    out = run_script("benchmarks.window", "--sizes", "10", "200", "--min-seconds", "0.01")
    assert "ratio" in out and out.strip().splitlines()[-1].split()[0] == "200"


@pytest.mark.redis
def test_redis_pool_benchmark_smoke() -> None:
    out = run_script("benchmarks.redis_pool", "--count", "640", "--repeat", "1")
    assert re.search(r"blocking +CPU µs per command: median +\d", out)
    assert re.search(r"waiting +CPU µs per command: median +\d", out)


def test_tokens_benchmark_smoke(tmp_path: Path) -> None:
    # plots need the optional `bench` extra (matplotlib); the figures do not
    plot = tmp_path / "tokens.png"
    plotting = importlib.util.find_spec("matplotlib") is not None
    plot_args = ["--plot", str(plot)] if plotting else []
    out = run_script("benchmarks.tokens", "--turns", "60", "--budget", "3000", *plot_args)
    assert "(d) this project" in out and "goal: every prompt within budget: met" in out
    assert "goal: 100% control identifiers kept: met" in out
    assert "with prompt caching" in out and "cached_tokens reported by the stub server" in out
    if plotting:
        assert plot.stat().st_size > 10_000


@pytest.mark.redis
def test_load_benchmark_smoke() -> None:
    """Both the bot and the minimal reference bot (benchmarks/naive_bot.py) serve the load, side by side,
    each worker on a core of its own where there are two."""
    pin = ["--pin"] if len(os.sched_getaffinity(0)) >= 2 else []
    out = run_script(
        "benchmarks.load",
        *pin,
        "--workers",
        "1",
        "--chats",
        "8",
        "--messages",
        "8",
        "--think",
        "0.2",
        "--llm-latency",
        "0.05",
        "--variant",
        "naive:WORKER_MODULE=benchmarks.naive_bot",
        "--variant",
        "this:",
    )
    lines = out.splitlines()
    header = next(line.split() for line in lines if line.split()[:2] == ["workers", "turns/s"])
    rows: dict[str, tuple[dict[str, str], dict[str, float]]] = {}
    label = ""
    for line in lines:  # a row of figures, then its "... per turn: N (...)" lines
        if line.split()[:1] == ["1"] and len(line.split()) == len(header):
            figures = dict(zip(header, line.split(), strict=True))
            label = figures["variant"]
            rows[label] = figures, {}
        elif label and (m := re.search(r"(redis commands|bot api requests) per turn: ([\d.]+)", line)):
            rows[label][1].setdefault(m.group(1), float(m.group(2)))
        elif label and (m := re.search(r"own time: p50 (-?[\d.]+)ms.*the stub took p50 ([\d.]+)ms", line)):
            rows[label][1]["net overhead p50"], rows[label][1]["stub p50"] = float(m.group(1)), float(m.group(2))
    assert set(rows) == {"naive", "this"}, out
    assert not pin or "pinned: a core per worker" in out, out
    for label, (figures, per_turn) in rows.items():
        assert float(figures["turns/s"]) > 0 and float(figures["cpu_ms/turn"]) > 0, (label, figures)
        assert per_turn["redis commands"] > 1 and per_turn["bot api requests"] >= 2, (label, per_turn)
        # each turn's model time as the stub measured it: at least its 50 ms sleep
        assert per_turn["stub p50"] >= 50 and per_turn["net overhead p50"] > 0, (label, per_turn)
    assert int(rows["this"][0]["compaction_turns"]) > 0, "compaction turns were measured"
    assert int(rows["naive"][0]["compaction_turns"]) == 0, "the naive bot keeps no summary"


def test_the_chaos_script_recognises_the_engines_re_send_log_line() -> None:
    """The chaos script tells crash-window duplicates from lease-lost ones by the engine's log line for
    a re-sent stored reply; it must keep recognising it (a moved logger once made it miss every one)."""
    from benchmarks.chaos import _REDELIVERY
    from bot.logs import TEXT_FORMAT
    from services.engine import chat

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    chat.log.addHandler(handler)
    try:
        chat.log.warning("chat %s turn %s: committed earlier, reply possibly unsent: sending it", -5, "u12")
    finally:
        chat.log.removeHandler(handler)
    assert [(c, t) for _, c, t in _REDELIVERY.findall(stream.getvalue())] == [("-5", "u12")]


def test_the_chaos_script_explains_a_duplicate_only_by_a_re_send() -> None:
    from benchmarks.chaos import explained_copies

    assert explained_copies([1.0, 2.0], [1.5]) == 1, "sent, cut off, re-sent by the next worker"
    assert explained_copies([1.0, 2.0, 3.0], [1.5, 2.5]) == 2, "the next worker was cut off in the window too"
    assert explained_copies([2.0, 5.1], [1.5, 5.0]) == 1, "never sent by the first; its re-sender cut off too"
    assert explained_copies([2.0, 3.0], [1.5]) == 0, "a copy came after the takeover and no re-send explains it"
    assert explained_copies([1.0, 2.0, 3.0], [1.5]) == 1, "a third copy no re-send explains"
    assert explained_copies([1.0, 2.0], []) == 0
    assert explained_copies([1.0], [0.5]) == 0


def test_knowledge_benchmark_smoke() -> None:
    out = run_script("benchmarks.knowledge", "--quick")
    assert "34 HTML files" in out and "87 answerable" in out, out
    assert "# corpus manpages: 32 HTML files" in out and "68 answerable" in out, out
    for line in ("bm25s + PyStemmer (baseline)", "product full text", "<- default", "s per 1 000 pages"):
        assert line in out, out
    assert re.search(r"prompts over the budget: 0 of \d+", out), out
    assert re.search(r"passages after the history \(product\)\s+\d+", out), out
    assert re.search(r"sent whole after the instruction \(STATIC\)\s+\d+", out), out
