"""The per-chat work queue, on fakeredis and on a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import fakeredis
import pytest
from redis.asyncio import Redis

from services.queue import ChatWorkQueue


@pytest.fixture(params=["fakeredis", "redis-server"])
async def queue(request: pytest.FixtureRequest) -> AsyncIterator[ChatWorkQueue]:
    if request.param == "fakeredis":
        client = fakeredis.FakeAsyncRedis()
    else:
        client = Redis.from_url(request.getfixturevalue("redis_server").url)
        await client.flushdb()
    yield ChatWorkQueue(redis=client, key_prefix="q", lease_ms=300)
    await client.aclose()


async def drain(queue: ChatWorkQueue, token: str) -> list[tuple[int, str]]:
    done: list[tuple[int, str]] = []
    while (claim := await queue.claim(token)) is not None:
        while True:
            item = await queue.head(claim)
            if item is None:
                if await queue.release(claim):
                    break
                continue
            done.append((claim.chat_id, item.payload))
            assert await queue.ack(claim, item.id)
    return done


async def test_items_come_out_per_chat_in_order_once(queue: ChatWorkQueue) -> None:
    for n in (2, 0, 1):  # taken in out of order: they come out by their order key
        assert await queue.enqueue(1, f"u{n}", f"a{n}", order=n)
        assert await queue.enqueue(2, f"v{n}", f"b{n}", order=n)
    assert not await queue.enqueue(1, "u1", "a1-again", order=1)
    done = await drain(queue, "w1")
    assert [p for c, p in done if c == 1] == ["a0", "a1", "a2"]
    assert [p for c, p in done if c == 2] == ["b0", "b1", "b2"]
    assert await queue.claim("w1") is None


async def test_a_held_chat_is_not_served_twice(queue: ChatWorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    first = await queue.claim("w1")
    assert first is not None
    await queue.enqueue(1, "u2", "b", order=2)  # makes the chat due again while w1 holds it
    assert await queue.claim("w2") is None
    assert not await queue.release(first)  # new work arrived: w1 keeps the chat
    item = await queue.head(first)
    assert item is not None and item.payload == "a"


async def test_ack_checks_the_head_id_exactly(queue: ChatWorkQueue) -> None:
    await queue.enqueue(1, "u12", "a", order=12)
    claim = await queue.claim("w1")
    assert claim is not None
    await queue.ack(claim, "u1")  # a prefix of the real id must not match
    item = await queue.head(claim)
    assert item is not None and item.id == "u12"


async def test_dead_worker_is_taken_over_after_the_lease(queue: ChatWorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    dead = await queue.claim("w1")
    assert dead is not None
    assert await queue.claim("w2") is None
    await asyncio.sleep(0.35)
    heir = await queue.claim("w2")
    assert heir is not None and heir.chat_id == 1
    item = await queue.head(heir)
    assert item is not None and item.payload == "a"
    assert not await queue.ack(dead, "u1"), "the dead worker's lease is gone"
    assert await queue.ack(heir, "u1")


async def test_renew_keeps_a_slow_item(queue: ChatWorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    claim = await queue.claim("w1")
    assert claim is not None
    for _ in range(4):
        await asyncio.sleep(0.12)
        assert await queue.renew(claim)
    assert await queue.claim("w2") is None


async def test_hand_back_makes_the_chat_available_at_once(queue: ChatWorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    claim = await queue.claim("w1")
    assert claim is not None
    await queue.hand_back(claim)
    heir = await queue.claim("w2")
    assert heir is not None


async def test_release_drops_the_watchdog_but_not_new_work(queue: ChatWorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    claim = await queue.claim("w1")
    assert claim is not None
    assert await queue.ack(claim, "u1")
    assert await queue.release(claim)
    await asyncio.sleep(0.35)
    assert await queue.claim("w2") is None  # nothing due: the watchdog was dropped
    await queue.enqueue(1, "u2", "b", order=2)
    assert await queue.claim("w2") is not None


async def test_stats_report_depth_and_age(queue: ChatWorkQueue) -> None:
    assert await queue.stats() == (0, 0)
    await queue.enqueue(1, "u1", "a", order=1)
    await queue.enqueue(2, "u1", "a", order=1)
    await asyncio.sleep(0.05)
    depth, age = await queue.stats()
    assert depth == 2 and age >= 0.04
