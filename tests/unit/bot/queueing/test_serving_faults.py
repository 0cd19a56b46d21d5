"""Faults around a worker's slots and the webhook intake serving the chats it receives: a crashed claim,
the ready set unreachable at intake, and wake-ups going to workers that can serve them."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import pytest
import redis
from aiogram import Bot, Dispatcher
from aiogram.types import Message
from redis.asyncio import Redis

from bot.queueing.intake import Intake
from bot.queueing.supervisor import Supervisor
from bot.queueing.worker import Worker
from services.backends.redis.deadletters import RedisDeadLetters
from services.backends.redis.keys import KeySpace
from services.backends.redis.queue import RedisWorkQueue
from services.backends.redis.scripts import redis_errors
from services.core.errors import TransientError
from services.ports.queue import Claim
from tests.worker_helpers import make_worker, update, update_json

KEYS = KeySpace("rf", "123456")


async def test_a_worker_loop_restarted_after_a_crash_in_claim_still_has_its_slot(bot: Bot) -> None:
    """The slots outlive run() (the intake's adopt shares them): a claim that raises a non-transient
    StoreError (e.g. MISCONF: RDB snapshots failing) crashes run(); the supervisor restarts it, and with
    WORKER_CONCURRENCY=1 it waited for the slot the crashed loop kept, forever, alive and 'ready'."""

    class MisconfOnce(RedisWorkQueue):
        crashes = 1

        async def claim(self, token: str) -> Claim | None:
            if self.crashes:
                self.crashes -= 1
                with redis_errors("cannot claim"):
                    raise redis.ResponseError("MISCONF Redis is configured to save RDB snapshots, but ...")
            return await super().claim(token)

    queue = MisconfOnce(redis=fakeredis.FakeAsyncRedis(), keys=KEYS, lease_ms=5000)
    served = asyncio.Event()

    async def on_message(message: Message) -> None:
        served.set()

    dispatcher = Dispatcher()
    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot, concurrency=1, idle_wait=0.05)
    supervisor = Supervisor(first_backoff=0.01)
    supervisor.start("worker", worker.run)
    try:
        await queue.enqueue(9, "u1", update_json(1, 9, "hi"), order=1)
        await asyncio.wait_for(served.wait(), 3)
    finally:
        worker.stop()
        await supervisor.stop()


async def test_a_ready_set_outage_at_intake_does_not_dead_letter_a_healthy_update(bot: Bot) -> None:
    """The ready set's master down, the chat's up (a cluster): intake answers 503 each time Telegram
    offers the update, and no offer may count as an attempt at it, or it would reach the dead letters
    unprocessed (max_attempts + VANISHED_ALLOWANCE) once the ready set is back."""
    r = fakeredis.FakeAsyncRedis()
    queue = RedisWorkQueue(redis=r, keys=KEYS, lease_ms=5000)
    ready_down = True
    originals = {name: getattr(queue, name) for name in ("_watch", "_mark_ready", "_claim")}

    def on_ready_node(name: str) -> Any:
        async def call(**kwargs: Any) -> Any:
            if ready_down:
                raise redis.ConnectionError("the ready set's master is down")
            return await originals[name](**kwargs)

        return call

    for name in originals:
        setattr(queue, name, on_ready_node(name))

    seen: list[str] = []
    served = asyncio.Event()

    async def on_message(message: Message) -> None:
        seen.append(message.text or "")
        served.set()

    dispatcher = Dispatcher()
    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot, concurrency=4, idle_wait=0.05)
    dead = RedisDeadLetters(redis=r, keys=KEYS)
    intake = Intake(queue=queue, dead_letters=dead, identity="w1", serve=worker)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0)  # run() marks itself alive before its first await
        assert worker.alive
        for _ in range(5):  # Telegram offers the update again after each 503
            with pytest.raises(TransientError):
                await intake.take(update(1, 9, "hello"))
        ready_down = False
        await intake.take(update(1, 9, "hello"))  # the next redelivery, the ready set back
        for _ in range(100):
            if seen or await dead.count():
                break
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await running
    assert [letter.error for letter in await dead.list()] == []
    assert seen == ["hello"]


async def test_a_busy_worker_does_not_take_the_wake_up_an_idle_worker_needs(bot: Bot, real_redis: Redis) -> None:
    """After claiming the last due chat with its last free slot, a worker must not wait on the wake list:
    it would pop the wake-up of the next chat and sit on it, while an idle worker behind it in BLPOP
    sleeps until idle_wait runs out. (A real redis-server: it serves blocked BLPOP clients first come,
    first served; fakeredis does not.)"""
    r = real_redis
    release = asyncio.Event()
    served = {"slow": asyncio.Event(), "other": asyncio.Event()}

    async def on_message(message: Message) -> None:
        if message.text == "slow":
            served["slow"].set()
            await release.wait()
        served[message.text or ""].set()

    def worker(identity: str) -> Worker:
        dispatcher = Dispatcher()
        dispatcher.message.register(on_message)
        w = make_worker(RedisWorkQueue(redis=r, keys=KEYS, lease_ms=5000), dispatcher, bot, concurrency=1, idle_wait=3)
        w.identity = identity
        return w

    busy, idle = worker("busy"), worker("idle")
    queue = RedisWorkQueue(redis=r, keys=KEYS, lease_ms=5000)
    tasks = [asyncio.create_task(busy.run())]
    try:
        await asyncio.sleep(0.2)  # busy: found nothing, in BLPOP; the next message's wake-up wakes it
        await queue.enqueue(9, "u1", update_json(1, 9, "slow"), order=1)
        await asyncio.wait_for(served["slow"].wait(), 2)  # busy: its only slot taken, now in BLPOP
        await asyncio.sleep(0.1)
        tasks.append(asyncio.create_task(idle.run()))  # idle: claims nothing, BLPOP behind busy
        await asyncio.sleep(0.2)
        await queue.enqueue(8, "u2", update_json(2, 8, "other"), order=2)
        await asyncio.wait_for(served["other"].wait(), 1.5)  # an idle worker exists: served at once
    finally:
        release.set()
        busy.stop()
        idle.stop()
        await asyncio.gather(*tasks)
