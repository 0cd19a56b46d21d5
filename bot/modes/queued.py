"""Queued mode (REDIS_URL set): durable intake (webhook server or leader poller) + queue worker, in one
process; run as many processes as needed against one Redis. A thin runner: the application
(``build_app``) on the shared backend, then its ``QueuedProcess`` started, waited for and stopped."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

from bot.backends import open_redis_backend
from bot.factory import Settings, build_app
from bot.queueing.process import QueuedProcess
from bot.serving.startup import StartupError

log = logging.getLogger(__name__)


async def run_queued(settings: Settings) -> None:
    async with contextlib.AsyncExitStack() as closing:  # the Bot's session, then the backend
        backend = await open_redis_backend(settings)
        closing.push_async_callback(quietly, backend.close)
        app = build_app(settings, backend)
        closing.push_async_callback(quietly, app.bot.session.close)
        process = QueuedProcess(app)
        try:  # a start that fails part way (after listening) still stops what it started
            await process.start()
            failed = await process.wait()
        finally:
            await process.stop()
        if failed:
            raise StartupError(f"a task kept failing: {process.failure}")


async def quietly(close: Callable[[], Awaitable[None]]) -> None:
    with contextlib.suppress(Exception):
        await close()
