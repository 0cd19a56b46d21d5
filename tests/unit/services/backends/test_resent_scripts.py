"""A script sent again after its reply was lost (the cluster client re-sends on a connection error or
a timeout, and a timed-out script may have run) must do no harm the second time. The client here runs
every script twice with the same arguments and returns the second reply, on a real redis-server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from services.backends.redis.keys import KeySpace
from services.backends.redis.queue import RedisWorkQueue
from services.backends.redis.ratelimit import RedisRateLimiter
from services.backends.redis.store import RedisSessionStore
from tests.conftest import RedisServer

KEYS = KeySpace("twice", "123456")


class ScriptsTwice(Redis):
    """While ``twice`` is set, runs each EVALSHA twice, as a re-send after a lost reply would, and
    answers with the second reply."""

    twice = False

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:  # type: ignore[override]
        if self.twice:
            await super().evalsha(sha, numkeys, *keys_and_args)
        return await super().evalsha(sha, numkeys, *keys_and_args)


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[ScriptsTwice]:
    client = ScriptsTwice.from_url(redis_server.url)
    await client.flushdb()
    yield client
    await client.aclose()


async def test_a_quarantine_run_twice_keeps_the_damaged_session_for_the_operator(client: ScriptsTwice) -> None:
    keys = KEYS.chat(7)
    damaged = [b'{"s":0,"r":"user","c":"order 7718","t":5}', b"\xff\xfe damaged"]
    await client.hset(keys.meta, mapping={"version": "4", "next_seq": "2"})
    await client.rpush(keys.msgs, *damaged)
    client.twice = True
    await RedisSessionStore(redis=client, keys=KEYS).quarantine(7, reason="unreadable")
    assert await client.lrange(keys.q_msgs, 0, -1) == damaged
    assert await client.hget(keys.q_meta, "version") == b"4"
    assert await client.hget(keys.meta, "version") == b"5"


async def test_a_refused_rate_limit_hit_run_twice_still_tells_the_customer_once(client: ScriptsTwice) -> None:
    client.twice = True
    limiter = RedisRateLimiter(redis=client, per_minute=1, keys=KEYS)
    assert (await limiter.hit(5, key="u1")).allowed
    refused = await limiter.hit(5, key="u2")
    assert not refused.allowed and refused.notify, "the one notice of this window must go out"
    again = await limiter.hit(5, key="u3")
    assert not again.allowed and not again.notify, "later refusals in the window stay silent"


async def test_a_failure_noted_twice_counts_one_attempt(client: ScriptsTwice) -> None:
    """Counted twice, one failure would send an update to the dead letters an attempt early."""
    queue = RedisWorkQueue(redis=client, keys=KEYS, lease_ms=5000)
    await queue.enqueue(3, "u3", "{}", order=1)
    claim = await queue.claim("w:1")
    assert claim is not None
    step = await queue.next(claim, acquire=True)
    assert step.item is not None and step.item.started == 1
    client.twice = True
    await queue.note(claim, step.item, "failed")
    client.twice = False
    again = await queue.next(claim)
    assert again.item is not None
    assert (again.item.started, again.item.failures) == (2, 1)
