"""KnowledgeGaps in Redis: one sorted set of question counts shared by every worker, one of when each
question was last asked, and per chat what it contributed, so /forget takes the chat's questions back
out (every key in one slot). With SESSION_TTL_SECONDS a question's count expires that long after it
was last asked (pruned on the Redis clock by the record and top scripts), as the chat records expire:
no question outlives every way of forgetting it."""

from __future__ import annotations

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import LUA_NOW, AnyRedis, redis_errors, register
from services.knowledge.gaps import GAPS_KEPT, normalize_question, worth_recording

# KEYS: counts, asked, the chat's record (record only).
_PRUNE = (
    LUA_NOW
    + """
local function drop(questions)
  for _, question in ipairs(questions) do
    redis.call('ZREM', KEYS[1], question)
    redis.call('ZREM', KEYS[2], question)
  end
end
local function prune(ttl)
  if ttl > 0 then drop(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ttl)) end
end
"""
)

# ARGV: question, kept, ttl (ms).
_RECORD = (
    _PRUNE
    + """
local ttl = tonumber(ARGV[3])
prune(ttl)
redis.call('ZINCRBY', KEYS[1], 1, ARGV[1])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
drop(redis.call('ZRANGE', KEYS[1], 0, -tonumber(ARGV[2]) - 1))
if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
return 0
"""
)

# ARGV: limit, ttl (ms). → question, count, question, count... most asked first.
_TOP = (
    _PRUNE
    + """
prune(tonumber(ARGV[2]))
return redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
"""
)

# KEYS: counts, asked, the chat's record.
_FORGET = """
local asked = redis.call('HGETALL', KEYS[3])
for i = 1, #asked, 2 do
  local left = tonumber(redis.call('ZINCRBY', KEYS[1], -tonumber(asked[i + 1]), asked[i]))
  if left <= 0 then
    redis.call('ZREM', KEYS[1], asked[i])
    redis.call('ZREM', KEYS[2], asked[i])
  end
end
redis.call('DEL', KEYS[3])
return 0
"""


class RedisKnowledgeGaps:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace, ttl_seconds: float = 0) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_ms = max(0, int(ttl_seconds * 1000))
        self._record = register(redis, _RECORD)
        self._top = register(redis, _TOP)
        self._forget = register(redis, _FORGET)

    def _keys_of(self, chat_id: int) -> list[str]:
        return [self._keys.knowledge_gaps, self._keys.knowledge_gaps_asked, self._keys.knowledge_gaps_of(chat_id)]

    async def record(self, chat_id: int, question: str) -> None:
        if not worth_recording(question):
            return
        with redis_errors("knowledge gap not recorded"):
            args = [normalize_question(question), GAPS_KEPT, self._ttl_ms]
            await self._record(keys=self._keys_of(chat_id), args=args)

    async def top(self, limit: int) -> list[tuple[str, int]]:
        if limit <= 0:
            return []
        keys = [self._keys.knowledge_gaps, self._keys.knowledge_gaps_asked]
        with redis_errors("knowledge gaps unavailable"):
            flat = await self._top(keys=keys, args=[limit, self._ttl_ms])
        pairs = zip(flat[::2], flat[1::2], strict=True)
        return [(_text(question), int(float(_text(count)))) for question, count in pairs]

    async def forget(self, chat_id: int) -> None:
        with redis_errors(f"cannot delete the knowledge gaps of chat {chat_id}"):
            await self._forget(keys=self._keys_of(chat_id))


def _text(value: bytes | str | float) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
