"""The Lua scripts' status codes are named once (``scripts.Status``): every script source names them,
none spells a bare negative status, and what ``register`` loads carries the numbers Python compares."""

from __future__ import annotations

import re

import fakeredis
import pytest

from services.backends.redis import handoffs, queue_scripts, scripts, store
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


@pytest.mark.parametrize(("module", "name", "source"), SCRIPTS, ids=[f"{m}.{n}" for m, n, _ in SCRIPTS])
def test_no_script_returns_a_bare_negative_status(module: str, name: str, source: str) -> None:
    assert re.findall(r"return \{?-\d", source) == []


def test_register_loads_the_numbers() -> None:
    script = register(fakeredis.FakeAsyncRedis(), "if x then return {BUSY} end return FENCE_LOST")
    assert script.source == "if x then return {-3} end return -2"
