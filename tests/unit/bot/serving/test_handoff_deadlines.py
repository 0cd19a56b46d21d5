"""The handoff reply-deadline watcher (in-process mode runs it beside the dispatcher)."""

from __future__ import annotations

import asyncio

from bot.serving.deadlines import watch_deadlines
from services.backends.memory import InMemoryBackend


async def test_the_deadline_watcher_goes_on_after_one_chat_fails() -> None:
    backend = InMemoryBackend()
    h = backend.handoffs
    await h.track(1, open=True, reply_within=0)
    await h.track(2, open=True, reply_within=0)
    done: list[int] = []

    async def act(chat_id: int) -> None:
        if chat_id == 1:
            raise RuntimeError("Forbidden: bot was blocked by the user")
        done.append(chat_id)

    watcher = asyncio.create_task(watch_deadlines(h, act, every=0.01))
    try:
        for _ in range(500):  # polled, at most 5 s
            if done or watcher.done():
                break
            await asyncio.sleep(0.01)
        assert not watcher.done(), "the watcher died"
        assert done == [2]
        assert await h.open_count() == 2, "the watcher changed the open set"
    finally:
        watcher.cancel()
