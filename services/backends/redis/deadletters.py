"""Dead letters: queued updates that could not be processed, kept for an operator instead of being
retried forever (``python -m bot dead-letters list | show | replay | drop``)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any, cast

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis, redis_errors, register
from services.ports.deadletters import DeadLetter

DEAD_LETTERS_KEPT = 10_000
"""The oldest records beyond this many are dropped (the index is trimmed with the records)."""

# KEYS: items (hash), index (zset). ARGV: id, record, at_ms.
_ADD = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local extra = redis.call('ZCARD', KEYS[2]) - KEPT
if extra > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, extra - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, extra - 1)
  redis.call('HDEL', KEYS[1], unpack(old))
end
return 1
""".replace("KEPT", str(DEAD_LETTERS_KEPT))

# KEYS: items, index. ARGV: ids...
_DROP = """
local n = 0
for i = 1, #ARGV do n = n + redis.call('HDEL', KEYS[1], ARGV[i]); redis.call('ZREM', KEYS[2], ARGV[i]) end
return n
"""


class RedisDeadLetters:
    """Dead-letter records in Redis (one hash slot: records and their time index)."""

    def __init__(self, *, redis: AnyRedis, keys: KeySpace | None = None) -> None:
        self._redis = redis
        self._keys = keys or KeySpace()
        self._add = register(redis, _ADD)
        self._drop = register(redis, _DROP)

    def _both(self) -> list[str]:
        return [self._keys.dead_items, self._keys.dead_index]

    async def add(
        self, *, chat_id: int, item_id: str, order: int, payload: str, error: str, attempts: int, worker: str
    ) -> DeadLetter:
        """Record (or overwrite: the id is the chat and the item) one dead letter."""
        letter = DeadLetter(
            id=DeadLetter.make_id(chat_id, item_id),
            chat_id=chat_id,
            item_id=item_id,
            order=order,
            payload=payload,
            error=error[:4000],
            attempts=attempts,
            worker=worker,
            at=time.time(),
        )
        record = json.dumps(asdict(letter), ensure_ascii=True, separators=(",", ":"))
        with redis_errors("cannot write a dead letter"):
            await self._add(keys=self._both(), args=[letter.id, record, int(letter.at * 1000)])
        return letter

    async def list(self, limit: int = 50) -> list[DeadLetter]:
        """The newest ``limit`` records, newest first."""
        with redis_errors("cannot read dead letters"):
            ids = cast(list[bytes], await self._redis.zrevrange(self._keys.dead_index, 0, limit - 1))
            if not ids:
                return []
            raw = await self._redis.hmget(self._keys.dead_items, ids)
        return [_decode(r) for r in raw if r is not None]

    async def get(self, letter_id: str) -> DeadLetter | None:
        with redis_errors("cannot read a dead letter"):
            raw = await self._redis.hget(self._keys.dead_items, letter_id)
        return _decode(raw) if raw is not None else None

    async def count(self) -> int:
        with redis_errors("cannot count dead letters"):
            return int(await self._redis.zcard(self._keys.dead_index))

    async def drop(self, *letter_ids: str) -> int:
        if not letter_ids:
            return 0
        with redis_errors("cannot drop dead letters"):
            return int(await self._drop(keys=self._both(), args=list(letter_ids)))

    async def drop_chat(self, chat_id: int) -> None:
        """Delete every record of one chat (``/forget``: they hold the customer's messages)."""
        ids: list[str] = []
        with redis_errors("cannot drop dead letters"):
            async for field, _ in self._redis.hscan_iter(self._keys.dead_items, match=f"{chat_id}:*"):
                ids.append(field.decode() if isinstance(field, bytes) else str(field))
        await self.drop(*ids)


def _decode(raw: Any) -> DeadLetter:
    data = cast(dict[str, Any], json.loads(raw))
    return DeadLetter(**data)
