"""Supervised tasks: a crash is logged and restarted with backoff; a task that keeps crashing makes the
process give up (so the orchestrator restarts it) and readiness reports it meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from bot.queueing.supervisor import Supervisor


async def test_a_crashed_task_is_restarted(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[int] = []
    finished = asyncio.Event()

    async def flaky() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError("boom")
        finished.set()

    supervisor = Supervisor(first_backoff=0.01)
    supervisor.start("poller", flaky)
    await asyncio.wait_for(finished.wait(), 5)
    assert len(runs) == 3 and not supervisor.failed.is_set()
    assert caplog.text.count("task poller crashed") == 2 and "Traceback" in caplog.text
    await supervisor.stop()


async def test_a_task_that_keeps_crashing_fails_the_process() -> None:
    async def broken() -> None:
        raise RuntimeError("always")

    async def healthy() -> None:
        await asyncio.sleep(3600)

    supervisor = Supervisor(max_failures=3, window=10, first_backoff=0.01)
    supervisor.start("worker", healthy)
    supervisor.start("poller", broken)
    await asyncio.wait_for(supervisor.failed.wait(), 5)
    assert supervisor.failure is not None and "poller" in supervisor.failure
    assert supervisor.health() == {"worker": True, "poller": False}
    await supervisor.stop()
    assert supervisor.health() == {"worker": False, "poller": False}
