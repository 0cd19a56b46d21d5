"""Redis session store: one round trip to load, one atomic Lua script per write.

Keys of one chat share the hash tag ``{chat:<id>}`` so the scripts also run on Redis Cluster:
``<prefix>:{chat:<id>}:meta`` (hash: version, next_seq, summary, summary_tokens),
``<prefix>:{chat:<id>}:msgs`` (list of JSON messages, oldest first) and
``<prefix>:{chat:<id>}:turns`` (sorted set: recent turn id → seq of its reply, for deduplication) and
``<prefix>:{chat:<id>}:replied`` (sorted set of turn ids whose reply was delivered).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.errors import ConcurrentUpdateError, StoreError
from services.models import Compaction, NewMessage, Session, StoredMessage
from services.store.base import TURN_IDS_KEPT, CommitResult, TurnStatus
from services.summary_state import SummaryState

_EXPIRE = """
local function expire_all(ttl, keys)
  if ttl > 0 then for _, key in ipairs(keys) do redis.call('EXPIRE', key, ttl) end end
end
"""

# KEYS: meta, msgs, turns. ARGV: expected_version, ttl, fold, summary, summary_tokens, turn_id,
# messages...  Returns {1, version} | {0, version} duplicate | {-1, version} stale.
_COMMIT = (
    _EXPIRE
    + """
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if ARGV[6] ~= '' and redis.call('ZSCORE', KEYS[3], ARGV[6]) then return {0, version} end
if version ~= tonumber(ARGV[1]) then return {-1, version} end
local seq = tonumber(redis.call('HGET', KEYS[1], 'next_seq') or '0')
for i = 7, #ARGV do
  -- messages arrive as JSON objects without their sequence number; it is prefixed here
  redis.call('RPUSH', KEYS[2], '{"s":' .. seq .. ',' .. string.sub(ARGV[i], 2))
  seq = seq + 1
end
local fold = tonumber(ARGV[3])
if fold > 0 then redis.call('LTRIM', KEYS[2], fold, -1) end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'summary', ARGV[4], 'summary_tokens', ARGV[5]) end
version = version + 1
redis.call('HSET', KEYS[1], 'version', version, 'next_seq', seq)
if ARGV[6] ~= '' then
  redis.call('ZADD', KEYS[3], seq - 1, ARGV[6])
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -TURN_IDS_KEPT - 1)
end
expire_all(tonumber(ARGV[2]), KEYS)
return {1, version}
""".replace("TURN_IDS_KEPT", str(TURN_IDS_KEPT))
)

# KEYS: meta, msgs. ARGV: expected_version, ttl, fold, summary, summary_tokens.
_COMPACT = (
    _EXPIRE
    + """
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if version ~= tonumber(ARGV[1]) then return {-1, version} end
local fold = tonumber(ARGV[3])
if fold > 0 then redis.call('LTRIM', KEYS[2], fold, -1) end
version = version + 1
redis.call('HSET', KEYS[1], 'version', version, 'summary', ARGV[4], 'summary_tokens', ARGV[5])
expire_all(tonumber(ARGV[2]), KEYS)
return {1, version}
"""
)

# KEYS: meta, msgs. ARGV: ttl.
_RESET = (
    _EXPIRE
    + """
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[1], 'summary', 'summary_tokens')
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
expire_all(tonumber(ARGV[1]), {KEYS[1]})
return version
"""
)


def chat_keys(prefix: str, chat_id: int) -> dict[str, str]:
    """Every key of one chat, all in the same Redis Cluster hash slot."""
    tag = f"{prefix}:{{chat:{chat_id}}}"
    return {"meta": f"{tag}:meta", "msgs": f"{tag}:msgs", "turns": f"{tag}:turns", "replied": f"{tag}:replied"}


class RedisSessionStore:
    """SessionStore on Redis (or anything speaking its protocol with Lua scripting)."""

    def __init__(self, *, redis: Redis, ttl_seconds: int = 0, key_prefix: str = "sb") -> None:
        self._redis = redis
        self._ttl = ttl_seconds
        self._prefix = key_prefix
        self._commit = redis.register_script(_COMMIT)
        self._compact = redis.register_script(_COMPACT)
        self._reset = redis.register_script(_RESET)

    @property
    def redis(self) -> Redis:
        return self._redis

    @property
    def key_prefix(self) -> str:
        return self._prefix

    @property
    def ttl_seconds(self) -> int:
        return self._ttl

    def keys(self, chat_id: int) -> dict[str, str]:
        return chat_keys(self._prefix, chat_id)

    async def load(self, chat_id: int) -> Session:
        keys = self.keys(chat_id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hgetall(keys["meta"])
                pipe.lrange(keys["msgs"], 0, -1)
                meta, raw_messages = await pipe.execute()
        except RedisError as exc:
            raise StoreError(f"cannot load chat {chat_id} from Redis: {type(exc).__name__}") from exc
        return _decode_session(chat_id, meta, raw_messages)

    async def commit_turn(
        self,
        chat_id: int,
        *,
        expected_version: int,
        messages: Sequence[NewMessage],
        compaction: Compaction | None = None,
        turn_id: str | None = None,
    ) -> CommitResult:
        encoded = [
            json.dumps({"r": m.role, "c": m.content, "t": m.tokens}, ensure_ascii=False, separators=(",", ":"))
            for m in messages
        ]
        keys = self.keys(chat_id)
        args: list[Any] = [
            expected_version,
            self._ttl,
            compaction.fold_count if compaction else 0,
            compaction.summary.to_json() if compaction else "",
            compaction.summary_tokens if compaction else 0,
            turn_id or "",
            *encoded,
        ]
        status, version = await self._run(self._commit, chat_id, [keys["meta"], keys["msgs"], keys["turns"]], args)
        return CommitResult(version=version, duplicate=status == 0)

    async def apply_compaction(self, chat_id: int, *, expected_version: int, compaction: Compaction) -> int:
        keys = self.keys(chat_id)
        args = [
            expected_version,
            self._ttl,
            compaction.fold_count,
            compaction.summary.to_json(),
            compaction.summary_tokens,
        ]
        _, version = await self._run(self._compact, chat_id, [keys["meta"], keys["msgs"]], args)
        return version

    async def _run(self, script: Any, chat_id: int, keys: list[str], args: list[Any]) -> tuple[int, int]:
        try:
            status, version = await script(keys=keys, args=args)
        except RedisError as exc:
            raise StoreError(f"cannot write chat {chat_id} to Redis: {type(exc).__name__}") from exc
        if int(status) == -1:
            raise ConcurrentUpdateError(f"chat {chat_id} changed (now version {version}); nothing written")
        return int(status), int(version)

    async def turn_status(self, chat_id: int, turn_id: str) -> TurnStatus:
        keys = self.keys(chat_id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.zscore(keys["turns"], turn_id)
                pipe.zscore(keys["replied"], turn_id)
                pipe.lindex(keys["msgs"], 0)
                reply_seq, replied, head = await pipe.execute()
            if reply_seq is None:
                return TurnStatus(replied=replied is not None)
            reply = None
            if head is not None:
                index = int(reply_seq) - StoredMessage.from_json(head).seq
                raw = await self._redis.lindex(keys["msgs"], index) if index >= 0 else None
                message = StoredMessage.from_json(raw) if raw is not None else None
                if message is not None and message.seq == int(reply_seq) and message.role == "assistant":
                    reply = message.content
        except RedisError as exc:
            raise StoreError(f"cannot read chat {chat_id}: {type(exc).__name__}") from exc
        return TurnStatus(committed=True, replied=replied is not None, reply=reply)

    async def mark_replied(self, chat_id: int, turn_id: str) -> None:
        key = self.keys(chat_id)["replied"]
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.zadd(key, {turn_id: time.time()})
                pipe.zremrangebyrank(key, 0, -TURN_IDS_KEPT - 1)
                if self._ttl > 0:
                    pipe.expire(key, self._ttl)
                await pipe.execute()
        except RedisError as exc:
            raise StoreError(f"cannot write chat {chat_id}: {type(exc).__name__}") from exc

    async def reset(self, chat_id: int) -> None:
        keys = self.keys(chat_id)
        try:
            await self._reset(keys=[keys["meta"], keys["msgs"]], args=[self._ttl])
        except RedisError as exc:
            raise StoreError(f"cannot reset chat {chat_id}: {type(exc).__name__}") from exc

    async def forget(self, chat_id: int) -> None:
        try:
            await self._redis.delete(*self.keys(chat_id).values())
        except RedisError as exc:
            raise StoreError(f"cannot delete chat {chat_id}: {type(exc).__name__}") from exc

    async def ping(self) -> None:
        try:
            await self._redis.ping()
        except RedisError as exc:
            raise StoreError(f"Redis unreachable: {type(exc).__name__}") from exc

    async def close(self) -> None:
        await self._redis.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decode_session(chat_id: int, meta: dict[Any, Any], raw_messages: list[Any]) -> Session:
    fields = {_text(k): _text(v) for k, v in meta.items()}
    try:
        summary = SummaryState.model_validate_json(fields["summary"]) if "summary" in fields else None
        return Session(
            chat_id=chat_id,
            version=int(fields.get("version", 0)),
            next_seq=int(fields.get("next_seq", 0)),
            summary=summary,
            summary_tokens=int(fields.get("summary_tokens", 0)),
            messages=tuple(StoredMessage.from_json(raw) for raw in raw_messages),
        )
    except (ValueError, KeyError) as exc:
        raise StoreError(f"chat {chat_id} holds unreadable data: {exc}") from exc
