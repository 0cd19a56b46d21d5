"""The polling leader's lease and the getUpdates offset: exactly one worker polls at a time, and only
the leader moves the offset (both keys share the ``{ns:poller}`` hash slot)."""

from __future__ import annotations

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis, redis_errors, register

# KEYS: leader. ARGV: token, lease_ms → 1 if this token leads (lease renewed or taken)
_LEAD = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]); return 1 end
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]); return 1 end
return 0
"""
# KEYS: leader, offset (one hash slot). ARGV: token, offset
_SET_OFFSET = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""
# KEYS: leader. ARGV: token
_RESIGN = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisPollingLease:
    """``services.ports.queue.PollingLease`` on Redis. Errors surface as StoreUnavailableError."""

    def __init__(self, *, redis: AnyRedis, keys: KeySpace, token: str, lease_ms: int) -> None:
        self._redis = redis
        self._leader_key = keys.poller_leader
        self._offset_key = keys.poller_offset
        self._token = token
        self.lease_ms = lease_ms
        self._lead = register(redis, _LEAD)
        self._set_offset = register(redis, _SET_OFFSET)
        self._resign = register(redis, _RESIGN)

    async def lead(self) -> bool:
        with redis_errors("poller lease"):
            return bool(await self._lead(keys=[self._leader_key], args=[self._token, self.lease_ms]))

    async def offset(self) -> int | None:
        with redis_errors("poller offset"):
            raw = await self._redis.get(self._offset_key)
        return int(raw) if raw else None

    async def set_offset(self, offset: int) -> bool:
        with redis_errors("poller offset"):
            return bool(await self._set_offset(keys=[self._leader_key, self._offset_key], args=[self._token, offset]))

    async def resign(self) -> None:
        with redis_errors("poller resign"):
            await self._resign(keys=[self._leader_key], args=[self._token])
