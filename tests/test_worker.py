"""The queue worker's lease handling, with aiogram's real Dispatcher and fakeredis."""

from __future__ import annotations

import asyncio
import json

import fakeredis
from aiogram import Bot, Dispatcher
from aiogram.types import Message
from redis.exceptions import ConnectionError as RedisConnectionError

from bot.worker import Worker
from services.queue import ChatWorkQueue, Claim, QueueItem


class FlakyQueue(ChatWorkQueue):
    """Redis goes away once under ``head``; ``renew`` is slow and swallows cancellation, as a client may."""

    fail_head_once = True
    renew_calls = 0

    async def head(self, claim: Claim) -> QueueItem | None:
        if self.fail_head_once:
            self.fail_head_once = False
            await asyncio.sleep(0.15)  # let a heartbeat run first
            raise RedisConnectionError("connection lost")
        return await super().head(claim)

    async def renew(self, claim: Claim) -> bool:
        self.renew_calls += 1
        try:
            await asyncio.sleep(0.2)  # a slow round trip: the cancellation lands here
            return await super().renew(claim)
        except asyncio.CancelledError:
            return True


def make_worker(queue: ChatWorkQueue, dispatcher: Dispatcher, bot: Bot) -> Worker:
    return Worker(queue=queue, dispatcher=dispatcher, bot=bot, identity="w1", concurrency=4, idle_wait=0.05, grace=1)


async def test_heartbeat_stops_with_its_serve_loop_even_if_cancellation_is_swallowed() -> None:
    queue = FlakyQueue(redis=fakeredis.FakeAsyncRedis(), key_prefix="w", lease_ms=300)
    bot = Bot("123456:TEST")
    worker = make_worker(queue, Dispatcher(), bot)
    await queue.enqueue(9, "u1", update(1, 9, "first"), order=1)
    claim = await queue.claim("w1:0")
    assert claim is not None
    await worker._serve(claim)  # the Redis error ends it while its heartbeat is inside renew()
    calls = queue.renew_calls
    assert calls >= 1
    await asyncio.sleep(0.6)
    assert queue.renew_calls == calls, "the heartbeat kept renewing the lease of a chat nobody serves"
    await bot.session.close()


def update(update_id: int, chat_id: int, text: str) -> str:
    return json.dumps(
        {
            "update_id": update_id,
            "message": {"message_id": update_id, "date": 0, "chat": {"id": chat_id, "type": "private"}, "text": text},
        }
    )


async def test_a_dead_serve_loop_never_keeps_its_lease() -> None:
    redis = fakeredis.FakeAsyncRedis()
    queue = FlakyQueue(redis=redis, key_prefix="w", lease_ms=300)
    seen: list[str] = []
    dispatcher = Dispatcher()

    async def on_message(message: Message) -> None:
        seen.append(message.text or "")

    dispatcher.message.register(on_message)
    bot = Bot("123456:TEST")
    worker = make_worker(queue, dispatcher, bot)
    await queue.enqueue(9, "u1", update(1, 9, "first"), order=1)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(100):  # the first serve loop dies on the Redis error; the chat must come back
            if seen:
                break
            await asyncio.sleep(0.05)
        assert seen == ["first"], "the chat was taken over after its lease expired"
        await asyncio.sleep(0.5)
        assert await redis.exists("w:{chat:9}:lease") == 0, "no heartbeat outlived its serve loop"
    finally:
        worker.stop()
        await running
        await bot.session.close()
