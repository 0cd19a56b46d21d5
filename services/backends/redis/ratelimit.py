"""Per-chat rate limit shared by every worker (sliding window of one minute in Redis)."""

from __future__ import annotations

import time

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import LUA_NOW, AnyRedis, redis_errors, register
from services.ports.ratelimit import RATE_WINDOW_SECONDS, RateDecision

# KEYS: hits (zset), notice (string). ARGV: limit, window_ms, member, key_ttl_ms.
_HIT = (
    LUA_NOW
    + """
local window = tonumber(ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then return {1, 0, 0} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {1, 0, 0}
end
local oldest = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2])
local wait = oldest + window - now
-- the notice token names the request that took it: the same request sent again still notifies
local first = redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', math.max(math.min(wait, tonumber(ARGV[4])), 1))
if not first then first = redis.call('GET', KEYS[2]) == ARGV[3] end
return {0, first and 1 or 0, wait}
"""
)


class RedisRateLimiter:
    def __init__(
        self,
        *,
        redis: AnyRedis,
        per_minute: int,
        keys: KeySpace | None = None,
        ttl_seconds: int = 0,
        window_seconds: int = RATE_WINDOW_SECONDS,
    ) -> None:
        self._redis = redis
        self._limit = per_minute
        self._window_ms = window_seconds * 1000
        # records live one window at most, and never longer than the session retention
        self._key_ttl_ms = self._window_ms if ttl_seconds <= 0 else min(window_seconds, ttl_seconds) * 1000
        self._keys = keys or KeySpace()
        self._hit = register(redis, _HIT)
        self._counter = 0

    def _chat_keys(self, chat_id: int) -> list[str]:
        keys = self._keys.chat(chat_id)
        return [keys.rate, keys.rate_notice]

    async def hit(self, chat_id: int, *, key: str | None = None) -> RateDecision:
        if self._limit <= 0:
            return RateDecision(True)
        self._counter += 1
        member = key or f"{time.time_ns()}-{id(self)}-{self._counter}"
        with redis_errors("rate limit unavailable"):
            allowed, notify, wait = await self._hit(
                keys=self._chat_keys(chat_id), args=[self._limit, self._window_ms, member, self._key_ttl_ms]
            )
        return RateDecision(bool(allowed), bool(notify), int(wait) / 1000)

    async def forget(self, chat_id: int) -> None:
        with redis_errors(f"cannot delete chat {chat_id}"):
            await self._redis.delete(*self._chat_keys(chat_id))
