"""Waiting for what a worker writes after the stubs saw it: a reply mark, a transcript entry or a flag
is written once Telegram has answered, so a test that reads Redis right after seeing a request races
the worker (a slower Bot API makes it lose every time)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float, what: str) -> None:
    """Return once ``check()`` is true; fail naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.02)
