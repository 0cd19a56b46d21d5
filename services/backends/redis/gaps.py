"""KnowledgeGaps in Redis: one sorted set of question counts shared by every worker, and per chat
what it contributed, so /forget takes the chat's questions back out (both keys in one slot)."""

from __future__ import annotations

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis, redis_errors, register
from services.knowledge.gaps import GAPS_KEPT, normalize_question

_RECORD = """
redis.call('ZINCRBY', KEYS[1], 1, ARGV[1])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[2]) - 1)
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return 0
"""

_FORGET = """
local asked = redis.call('HGETALL', KEYS[2])
for i = 1, #asked, 2 do
  local left = tonumber(redis.call('ZINCRBY', KEYS[1], -tonumber(asked[i + 1]), asked[i]))
  if left <= 0 then redis.call('ZREM', KEYS[1], asked[i]) end
end
redis.call('DEL', KEYS[2])
return 0
"""


class RedisKnowledgeGaps:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace, ttl_seconds: int = 0) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl = ttl_seconds
        self._record = register(redis, _RECORD)
        self._forget = register(redis, _FORGET)

    async def record(self, chat_id: int, question: str) -> None:
        keys = [self._keys.knowledge_gaps, self._keys.knowledge_gaps_of(chat_id)]
        with redis_errors("knowledge gap not recorded"):
            await self._record(keys=keys, args=[normalize_question(question), GAPS_KEPT, self._ttl])

    async def top(self, limit: int) -> list[tuple[str, int]]:
        with redis_errors("knowledge gaps unavailable"):
            rows = await self._redis.zrevrange(self._keys.knowledge_gaps, 0, limit - 1, withscores=True)
        found: list[tuple[str, int]] = []
        for row in rows:
            question, count = (row[0], row[1]) if isinstance(row, (tuple, list)) else (row, 0)
            found.append((question.decode() if isinstance(question, bytes) else str(question), int(count)))
        return found

    async def forget(self, chat_id: int) -> None:
        keys = [self._keys.knowledge_gaps, self._keys.knowledge_gaps_of(chat_id)]
        with redis_errors(f"cannot delete the knowledge gaps of chat {chat_id}"):
            await self._forget(keys=keys)
