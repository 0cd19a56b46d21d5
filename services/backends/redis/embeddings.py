"""EmbeddingCache in Redis, shared by every worker: per embedding model one hash of passage id →
vector (no expiry: a vector is valid as long as its text, which the id hashes) and one hash of claims,
so workers starting together split the embedding work instead of each paying for all of it. Both keys
of a model share a hash tag: one slot, so it works unchanged on a Redis Cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import LUA_NOW, AnyRedis, redis_errors, register

CHUNK = 1000
"""Passages per command (HMGET/HSET/claim), so one call never blocks the server for long."""

_CLAIM = (
    LUA_NOW
    + """
local won = {}
for i = 2, #ARGV do
  local until_ms = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if until_ms < now then
    redis.call('HSET', KEYS[1], ARGV[i], now + tonumber(ARGV[1]))
    won[#won + 1] = ARGV[i]
  end
end
return won
"""
)


class RedisEmbeddingCache:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace) -> None:
        self._redis = redis
        self._keys = keys
        self._claim = register(redis, _CLAIM)

    async def get_many(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with redis_errors("embedding cache unavailable"):
            for start in range(0, len(ids), CHUNK):
                chunk = list(ids[start : start + CHUNK])
                values = await self._redis.hmget(self._keys.embeddings(model), chunk)
                for pid, value in zip(chunk, values, strict=True):
                    if isinstance(value, bytes):
                        found[pid] = value
        return found

    async def put_many(self, model: str, vectors: Mapping[str, bytes]) -> None:
        items = list(vectors.items())
        with redis_errors("embedding cache unavailable"):
            for start in range(0, len(items), CHUNK):
                await self._redis.hset(self._keys.embeddings(model), mapping=dict(items[start : start + CHUNK]))

    async def claim(self, model: str, ids: Sequence[str], *, ttl_seconds: float) -> set[str]:
        won: set[str] = set()
        with redis_errors("embedding cache unavailable"):
            for start in range(0, len(ids), CHUNK):
                chunk = list(ids[start : start + CHUNK])
                got = await self._claim(
                    keys=[self._keys.embedding_claims(model)], args=[int(ttl_seconds * 1000), *chunk]
                )
                won.update(v.decode() if isinstance(v, bytes) else str(v) for v in got)
        return won

    async def release(self, model: str, ids: Sequence[str]) -> None:
        with redis_errors("embedding cache unavailable"):
            for start in range(0, len(ids), CHUNK):
                await self._redis.hdel(self._keys.embedding_claims(model), *ids[start : start + CHUNK])
