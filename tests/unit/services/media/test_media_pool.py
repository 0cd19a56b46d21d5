"""Media work runs in threads of its own: files waiting for a decode or an extraction slot hold none
of the loop's default executor, which other chats' work (DNS look-ups, disk caches) needs."""

from __future__ import annotations

import asyncio
import threading

from services.media.pool import MEDIA_THREADS, in_media_pool


async def test_a_burst_of_blocked_media_work_leaves_the_default_executor_free() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def stuck_file() -> str:  # a document or image holding its slot as long as the test wants
        started.release()
        release.wait(60)
        return "read"

    burst = [asyncio.ensure_future(in_media_pool(stuck_file)) for _ in range(3 * MEDIA_THREADS)]
    try:
        for _ in range(MEDIA_THREADS):  # every media thread is busy
            assert await asyncio.to_thread(started.acquire, True, 30)
        # another chat's work on the default executor is not queued behind the files
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "other chat"), 30) == "other chat"
        assert not any(task.done() for task in burst)
    finally:
        release.set()
    assert await asyncio.gather(*burst) == ["read"] * len(burst)
