"""The per-chat rate limit, shared by two workers (two clients of one real redis-server)."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from services.backends.memory import InMemoryRateLimiter
from services.backends.redis.keys import KeySpace
from services.backends.redis.ratelimit import RedisRateLimiter
from tests.conftest import RedisServer


async def test_two_workers_share_one_limit(redis_server: RedisServer, real_redis: Redis) -> None:
    other = Redis.from_url(redis_server.url)
    worker_a = RedisRateLimiter(redis=real_redis, per_minute=3, keys=KeySpace("t", "123456"))
    worker_b = RedisRateLimiter(redis=other, per_minute=3, keys=KeySpace("t", "123456"))
    decisions = [await (worker_a if n % 2 == 0 else worker_b).hit(5) for n in range(6)]
    assert [d.allowed for d in decisions] == [True, True, True, False, False, False]
    assert [d.notify for d in decisions[3:]] == [True, False, False], "one notice, not one per message"
    assert 0 < decisions[3].retry_after <= 60
    assert (await worker_b.hit(6)).allowed, "chats are independent"
    await worker_a.forget(5)
    assert (await worker_b.hit(5)).allowed
    await other.aclose()


async def test_window_slides(redis_server: RedisServer, real_redis: Redis) -> None:
    limiter = RedisRateLimiter(redis=real_redis, per_minute=1, keys=KeySpace("t", "123456"), window_seconds=1)
    assert (await limiter.hit(1)).allowed
    assert not (await limiter.hit(1)).allowed
    await asyncio.sleep(1.1)
    assert (await limiter.hit(1)).allowed


async def test_zero_means_off() -> None:
    limiter = InMemoryRateLimiter(per_minute=0)
    assert all([(await limiter.hit(1)).allowed for _ in range(100)])
