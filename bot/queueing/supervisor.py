"""Supervision of the long-running tasks of a worker process (worker loop, poller, gauges).

A task that raises is logged with its traceback and restarted with exponential backoff; a task that
keeps failing (``max_failures`` within ``window`` seconds) makes the whole process give up, so the
orchestrator restarts it — a process that looks alive but serves nobody is worse than a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bot.metrics import TASK_RESTARTS

log = logging.getLogger(__name__)


@dataclass
class _Supervised:
    name: str
    task: asyncio.Task[None] | None = None
    healthy: bool = True
    failures: list[float] = field(default_factory=list)


class Supervisor:
    """Runs coroutine factories as restartable tasks. ``failed`` is set when one keeps crashing."""

    def __init__(
        self, *, max_failures: int = 5, window: float = 60.0, first_backoff: float = 0.5, max_backoff: float = 15.0
    ) -> None:
        self._max_failures = max_failures
        self._window = window
        self._first_backoff = first_backoff
        self._max_backoff = max_backoff
        self._tasks: dict[str, _Supervised] = {}
        self.failed = asyncio.Event()
        self.failure: str | None = None

    def start(self, name: str, factory: Callable[[], Awaitable[None]]) -> None:
        """Run ``factory()`` until it returns (a normal stop) or the supervisor is stopped."""
        supervised = _Supervised(name)
        supervised.task = asyncio.create_task(self._keep(supervised, factory), name=name)
        self._tasks[name] = supervised

    def health(self) -> dict[str, bool]:
        """Per task: running and not in a crash-restart backoff."""
        return {name: s.healthy and s.task is not None and not s.task.done() for name, s in self._tasks.items()}

    async def _keep(self, supervised: _Supervised, factory: Callable[[], Awaitable[None]]) -> None:
        backoff = self._first_backoff
        while True:
            started = time.monotonic()
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("task %s crashed", supervised.name)
            TASK_RESTARTS.labels(supervised.name).inc()
            now = time.monotonic()
            supervised.failures = [t for t in supervised.failures if now - t < self._window] + [now]
            if len(supervised.failures) >= self._max_failures:
                self.failure = f"task {supervised.name} crashed {len(supervised.failures)} times in {self._window:.0f}s"
                log.critical("%s; giving up so the process is restarted", self.failure)
                supervised.healthy = False
                self.failed.set()
                return
            if now - started > self._window:
                backoff = self._first_backoff  # it ran fine for a while: start the backoff over
            supervised.healthy = False
            log.warning("restarting task %s in %.1fs", supervised.name, backoff)
            await asyncio.sleep(backoff)
            supervised.healthy = True
            backoff = min(backoff * 2, self._max_backoff)

    async def stop(self, *names: str) -> None:
        """Cancel the named tasks (all when none is named) and wait for them."""
        chosen = [self._tasks[n] for n in names] if names else list(self._tasks.values())
        tasks = [s.task for s in chosen if s.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def wait(self, *names: str) -> None:
        """Wait for the named tasks to finish on their own (e.g. after their stop() method); a name
        never started is skipped (a start that failed before it)."""
        for name in names:
            supervised = self._tasks.get(name)
            task = supervised.task if supervised is not None else None
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
