"""The Lua scripts' status codes are named once (``scripts.Status``): every script source names them,
none spells a bare number where a status goes (the whole reply, or the first element of a reply
table), Python compares the replies with ``Status`` members, not numbers, and what ``register`` loads
carries the numbers Python compares. A number that is not a status says so in a Lua comment
(``-- ... not a status``) on its line."""

from __future__ import annotations

import ast
import inspect
import re

import fakeredis
import pytest

from services.backends.redis import handoffs, queue, queue_scripts, scripts, store
from services.backends.redis.scripts import Status, register, with_status

SCRIPTS = [
    (module.__name__, name, value)
    for module in (queue_scripts, store, handoffs, scripts)
    for name, value in vars(module).items()
    if isinstance(value, str) and "redis.call" in value and (module is scripts or not name.startswith("LUA_"))
]
"""Every Lua text of the Redis backends, each once (the shared ``LUA_`` snippets under ``scripts``)."""


def test_the_names_become_their_numbers() -> None:
    assert with_status("return {BUSY} end; return {LEASE_LOST}; {FENCE_LOST, 0}; NOTHING_ELSE") == (
        "return {-3} end; return {-1}; {-2, 0}; NOTHING_ELSE"
    )
    assert Status.LEASE_LOST is Status.STALE and len({int(s) for s in Status}) == len(list(Status))


def test_the_scripts_are_found() -> None:
    assert len(SCRIPTS) >= 15


BARE_STATUS = re.compile(r"\breturn\s*\{?\s*-?\d")
"""``return 1``, ``return -2``, ``return {0, version}``: a number where a status goes."""


def bare_statuses(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if BARE_STATUS.search(line) and "not a status" not in line]


@pytest.mark.parametrize(("module", "name", "source"), SCRIPTS, ids=[f"{m}.{n}" for m, n, _ in SCRIPTS])
def test_no_script_returns_a_bare_number_as_its_status(module: str, name: str, source: str) -> None:
    assert bare_statuses(source) == []


def test_the_bare_status_check_sees_one() -> None:
    source = (
        "if x then return {0, version} end\nreturn 1\nreturn -2\nreturn {DONE, 1}\nreturn 0  -- a count, not a status"
    )
    assert bare_statuses(source) == ["if x then return {0, version} end", "return 1", "return -2"]


def number_comparisons(module: object) -> list[str]:
    """Comparisons with 0 or 1 in a module's Python (where a script's status would be compared)."""
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops)
        and any(isinstance(side, ast.Constant) and side.value in (0, 1) for side in (node.left, *node.comparators))
    ]


@pytest.mark.parametrize("module", [queue, store, handoffs], ids=lambda module: module.__name__)
def test_python_compares_the_replies_with_status_members(module: object) -> None:
    assert number_comparisons(module) == []


def test_register_loads_the_numbers() -> None:
    script = register(fakeredis.FakeAsyncRedis(), "if x then return {BUSY} end return FENCE_LOST")
    assert script.source == "if x then return {-3} end return -2"
