"""EmbeddingCache in Redis, shared by every worker: one key per passage and model (no expiry: a
passage's vector is valid as long as its text, which its id hashes), and a short claim key per passage
so workers starting together split the embedding work instead of each paying for all of it. One key per
command (in a non-transactional pipeline), so it works unchanged on a Redis Cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis, redis_errors


class RedisEmbeddingCache:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace) -> None:
        self._redis = redis
        self._keys = keys

    async def get_many(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
        if not ids:
            return {}
        with redis_errors("embedding cache unavailable"):
            pipe = self._redis.pipeline(transaction=False)
            for passage_id in ids:
                pipe.get(self._keys.embedding(model, passage_id))
            values = await pipe.execute()
        return {pid: bytes(v) for pid, v in zip(ids, values, strict=True) if v is not None}

    async def put_many(self, model: str, vectors: Mapping[str, bytes]) -> None:
        if not vectors:
            return
        with redis_errors("embedding cache unavailable"):
            pipe = self._redis.pipeline(transaction=False)
            for passage_id, vector in vectors.items():
                pipe.set(self._keys.embedding(model, passage_id), vector)
            await pipe.execute()

    async def claim(self, model: str, ids: Sequence[str], *, ttl_seconds: float) -> set[str]:
        if not ids:
            return set()
        with redis_errors("embedding cache unavailable"):
            pipe = self._redis.pipeline(transaction=False)
            for passage_id in ids:
                pipe.set(self._keys.embedding_claim(model, passage_id), b"1", nx=True, px=int(ttl_seconds * 1000))
            won = await pipe.execute()
        return {pid for pid, ok in zip(ids, won, strict=True) if ok}
