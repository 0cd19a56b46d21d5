"""Redis session store: one read-only Lua script to load, one atomic Lua script per write.

The keys of a chat (built by ``services.backends.redis.keys``) share one hash slot, so every script also runs on Redis
Cluster (reads are scripts too rather than MULTI pipelines: one code path for both deployments).
Every write takes the caller's fencing token: a worker that lost the chat's lease cannot write
(``LeaseLostError``), and every write is also fenced by the session's version, which only ever grows —
``/new`` and ``/forget`` move it on too, so no turn loaded before them can be committed after them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import (
    LUA_FENCE,
    LUA_MARK_REPLIED,
    AnyRedis,
    Status,
    redis_errors,
    register,
)
from services.core.errors import ConcurrentUpdateError, CorruptSessionError, LeaseLostError
from services.core.fence import Fence, token_of
from services.core.records import Compaction, NewMessage, Session, StoredMessage
from services.core.summary_state import SummaryState
from services.ports.sessions import TURN_IDS_KEPT, CommitResult, TurnStatus

_EXPIRE = """
local function expire_all(ttl, keys)
  if ttl > 0 then for _, key in ipairs(keys) do redis.call('EXPIRE', key, ttl) end end
end
local function version_of(meta)
  return tonumber(redis.call('HGET', meta, 'version') or '0') or 0
end
"""

# KEYS: meta, msgs, turns, lease. ARGV: expected_version, ttl, fold, summary, summary_tokens, turn_id,
# token, messages...  Returns {DONE, version} | {NOTHING, version} duplicate | {STALE, version} | {FENCE_LOST, 0}.
_COMMIT = (
    _EXPIRE
    + LUA_FENCE
    + """
if not holds(KEYS[4], ARGV[7]) then return {FENCE_LOST, 0} end
local version = version_of(KEYS[1])
if ARGV[6] ~= '' and redis.call('ZSCORE', KEYS[3], ARGV[6]) then return {NOTHING, version} end
if version ~= tonumber(ARGV[1]) then return {STALE, version} end
local seq = tonumber(redis.call('HGET', KEYS[1], 'next_seq') or '0') or 0
for i = 8, #ARGV do
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
expire_all(tonumber(ARGV[2]), {KEYS[1], KEYS[2], KEYS[3]})
return {DONE, version}
""".replace("TURN_IDS_KEPT", str(TURN_IDS_KEPT))
)

# KEYS: meta, msgs, lease. ARGV: expected_version, ttl, fold, summary, summary_tokens, token.
_COMPACT = (
    _EXPIRE
    + LUA_FENCE
    + """
if not holds(KEYS[3], ARGV[6]) then return {FENCE_LOST, 0} end
local version = version_of(KEYS[1])
if version ~= tonumber(ARGV[1]) then return {STALE, version} end
local fold = tonumber(ARGV[3])
if fold > 0 then redis.call('LTRIM', KEYS[2], fold, -1) end
version = version + 1
redis.call('HSET', KEYS[1], 'version', version, 'summary', ARGV[4], 'summary_tokens', ARGV[5])
expire_all(tonumber(ARGV[2]), {KEYS[1], KEYS[2]})
return {DONE, version}
"""
)

# KEYS: replied, lease. ARGV: turn_id, now, ttl, token. The record of a reply that went out: refused only
# when another worker holds the chat (scripts.LUA_FENCE), not because the caller's lease lapsed.
_MARK_REPLIED = (
    LUA_MARK_REPLIED
    + LUA_FENCE
    + """
if not nobody_else_holds(KEYS[2], ARGV[4]) then return {FENCE_LOST, 0} end
mark_replied(KEYS[1], ARGV[2], tonumber(ARGV[3]), {ARGV[1]})
return {DONE, 0}
"""
)

# KEYS: meta, msgs, lease. ARGV: ttl, token. /new: summary and messages go, the version moves on.
_RESET = (
    _EXPIRE
    + LUA_FENCE
    + """
if not holds(KEYS[3], ARGV[2]) then return {FENCE_LOST, 0} end
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[1], 'summary', 'summary_tokens')
local version = version_of(KEYS[1]) + 1
redis.call('HSET', KEYS[1], 'version', version)
expire_all(tonumber(ARGV[1]), {KEYS[1]})
return {DONE, version}
"""
)

# KEYS: meta, lease, content keys... ARGV: ttl, token. /forget: every byte of the conversation goes;
# meta keeps only the version counter (one number), so nothing loaded before can be written back.
_FORGET = (
    _EXPIRE
    + LUA_FENCE
    + """
if not holds(KEYS[2], ARGV[2]) then return {FENCE_LOST, 0} end
local version = version_of(KEYS[1]) + 1
redis.call('DEL', KEYS[1])
for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('HSET', KEYS[1], 'version', version)
expire_all(tonumber(ARGV[1]), {KEYS[1]})
return {DONE, version}
"""
)

# KEYS: meta, msgs, q_meta, q_msgs, q_info, lease. ARGV: ttl, token, reason, now, quarantine id.
# The unreadable session moves aside (byte for byte) and the chat starts over at a higher version.
# Sent twice (a reply lost to a cut link, the client re-sends it), the second run does nothing: it
# would otherwise move the fresh stub over the quarantined copy.
_QUARANTINE = (
    _EXPIRE
    + LUA_FENCE
    + """
if not holds(KEYS[6], ARGV[2]) then return {FENCE_LOST, 0} end
if redis.call('HGET', KEYS[5], 'id') == ARGV[5] then return {DONE, version_of(KEYS[1])} end
local raw, seq = nil, nil
if redis.call('TYPE', KEYS[1]).ok == 'hash' then
  raw, seq = redis.call('HGET', KEYS[1], 'version'), redis.call('HGET', KEYS[1], 'next_seq')
end
local version = (tonumber(raw or '0') or 0) + 1
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('RENAME', KEYS[1], KEYS[3]) end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('RENAME', KEYS[2], KEYS[4]) end
redis.call('HSET', KEYS[5], 'at', ARGV[4], 'reason', ARGV[3], 'id', ARGV[5])
redis.call('HSET', KEYS[1], 'version', version)
-- sequence numbers go on: recent turn ids still point at reply numbers of the quarantined messages
if tonumber(seq or '') then redis.call('HSET', KEYS[1], 'next_seq', seq) end
expire_all(tonumber(ARGV[1]), {KEYS[1], KEYS[3], KEYS[4], KEYS[5]})
return {DONE, version}
"""
)


# KEYS: meta, msgs. → {meta as a flat field/value list, messages}: one consistent snapshot.
_LOAD = """
return {redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
"""

# KEYS: meta, msgs, turns, replied. ARGV: turn id
_LOAD_TURN = """
return {redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1),
        redis.call('ZSCORE', KEYS[3], ARGV[1]), redis.call('ZSCORE', KEYS[4], ARGV[1])}
"""

# KEYS: turns, replied, msgs. ARGV: turn_id. → {reply seq or false, replied or false, first message or false}
_TURN_STATUS = """
local reply_seq = redis.call('ZSCORE', KEYS[1], ARGV[1])
return {reply_seq, redis.call('ZSCORE', KEYS[2], ARGV[1]), redis.call('LINDEX', KEYS[3], 0)}
"""


def _fence_lost_text(chat_id: int) -> str:
    return f"chat {chat_id}: this worker no longer holds the lease; nothing written"


class RedisSessionStore:
    """SessionStore on Redis (or anything speaking its protocol with Lua scripting)."""

    def __init__(self, *, redis: AnyRedis, ttl_seconds: int = 0, keys: KeySpace | None = None) -> None:
        self._redis = redis
        self._ttl = ttl_seconds
        self._keys = keys or KeySpace()
        self._commit = register(redis, _COMMIT)
        self._compact = register(redis, _COMPACT)
        self._mark_replied = register(redis, _MARK_REPLIED)
        self._reset = register(redis, _RESET)
        self._forget = register(redis, _FORGET)
        self._quarantine = register(redis, _QUARANTINE)
        self._load = register(redis, _LOAD)
        self._turn_status = register(redis, _TURN_STATUS)
        self._load_turn = register(redis, _LOAD_TURN)

    @property
    def key_space(self) -> KeySpace:
        return self._keys

    async def load(self, chat_id: int) -> Session:
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot load chat {chat_id}"):
            flat, raw_messages = await self._load(keys=[keys.meta, keys.msgs])
        meta = dict(zip(flat[::2], flat[1::2], strict=True))
        return _decode_session(chat_id, meta, raw_messages)

    async def load_turn(self, chat_id: int, turn_id: str) -> tuple[TurnStatus, Session]:
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot load chat {chat_id}"):
            flat, raw_messages, reply_seq, replied = await self._load_turn(
                keys=[keys.meta, keys.msgs, keys.turns, keys.replied], args=[turn_id]
            )
        session = _decode_session(chat_id, dict(zip(flat[::2], flat[1::2], strict=True)), raw_messages)
        if reply_seq is None:
            return TurnStatus(replied=replied is not None), session
        seq = int(float(reply_seq))
        reply = next((m.content for m in session.messages if m.seq == seq and m.role == "assistant"), None)
        return TurnStatus(committed=True, replied=replied is not None, reply=reply), session

    async def commit_turn(
        self,
        chat_id: int,
        *,
        expected_version: int,
        messages: Sequence[NewMessage],
        compaction: Compaction | None = None,
        turn_id: str | None = None,
        fence: Fence | None = None,
    ) -> CommitResult:
        encoded = [m.to_json() for m in messages]
        keys = self._keys.chat(chat_id)
        args: list[Any] = [
            expected_version,
            self._ttl,
            compaction.fold_count if compaction else 0,
            compaction.summary.to_json() if compaction else "",
            compaction.summary_tokens if compaction else 0,
            turn_id or "",
            token_of(fence),
            *encoded,
        ]
        status, version = await self._run(self._commit, chat_id, [keys.meta, keys.msgs, keys.turns, keys.lease], args)
        return CommitResult(version=version, duplicate=status == Status.NOTHING)

    async def apply_compaction(
        self, chat_id: int, *, expected_version: int, compaction: Compaction, fence: Fence | None = None
    ) -> int:
        keys = self._keys.chat(chat_id)
        args = [
            expected_version,
            self._ttl,
            compaction.fold_count,
            compaction.summary.to_json(),
            compaction.summary_tokens,
            token_of(fence),
        ]
        _, version = await self._run(self._compact, chat_id, [keys.meta, keys.msgs, keys.lease], args)
        return version

    async def _run(self, script: Any, chat_id: int, keys: list[str], args: list[Any]) -> tuple[int, int]:
        with redis_errors(f"cannot write chat {chat_id}"):
            status, version = await script(keys=keys, args=args)
        if int(status) == Status.FENCE_LOST:
            raise LeaseLostError(_fence_lost_text(chat_id))
        if int(status) == Status.STALE:
            raise ConcurrentUpdateError(f"chat {chat_id} changed (now version {version}); nothing written")
        return int(status), int(version)

    async def turn_status(self, chat_id: int, turn_id: str) -> TurnStatus:
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot read chat {chat_id}"):
            reply_seq, replied, head = await self._turn_status(
                keys=[keys.turns, keys.replied, keys.msgs], args=[turn_id]
            )
            if reply_seq is None:
                return TurnStatus(replied=replied is not None)
            reply_seq = int(float(reply_seq))
            reply = None
            if head is not None:
                index = reply_seq - _decode_message(chat_id, head).seq
                raw = await self._redis.lindex(keys.msgs, index) if index >= 0 else None
                message = _decode_message(chat_id, raw) if raw is not None else None
                if message is not None and message.seq == reply_seq and message.role == "assistant":
                    reply = message.content
        return TurnStatus(committed=True, replied=replied is not None, reply=reply)

    async def mark_replied(self, chat_id: int, turn_id: str, *, fence: Fence | None = None) -> None:
        keys = self._keys.chat(chat_id)
        args = [turn_id, time.time(), self._ttl, token_of(fence)]
        await self._run(self._mark_replied, chat_id, [keys.replied, keys.lease], args)

    async def reset(self, chat_id: int, *, fence: Fence | None = None) -> None:
        keys = self._keys.chat(chat_id)
        await self._run(self._reset, chat_id, [keys.meta, keys.msgs, keys.lease], [self._ttl, token_of(fence)])

    async def forget(self, chat_id: int, *, fence: Fence | None = None) -> None:
        keys = self._keys.chat(chat_id)
        await self._run(self._forget, chat_id, [keys.meta, keys.lease, *keys.content()], [self._ttl, token_of(fence)])

    async def quarantine(self, chat_id: int, *, reason: str, fence: Fence | None = None) -> None:
        keys = self._keys.chat(chat_id)
        await self._run(
            self._quarantine,
            chat_id,
            [keys.meta, keys.msgs, keys.q_meta, keys.q_msgs, keys.q_info, keys.lease],
            [self._ttl, token_of(fence), reason[:2000], int(time.time()), uuid.uuid4().hex],
        )

    async def ping(self) -> None:
        with redis_errors("Redis unreachable"):
            await self._redis.ping()

    async def close(self) -> None:
        await self._redis.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decode_message(chat_id: int, raw: bytes | str) -> StoredMessage:
    try:
        return StoredMessage.from_json(raw)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptSessionError(f"chat {chat_id} holds an unreadable message: {exc}") from exc


def _decode_session(chat_id: int, meta: dict[Any, Any], raw_messages: list[Any]) -> Session:
    try:
        fields = {_text(k): _text(v) for k, v in meta.items()}
        summary = SummaryState.model_validate_json(fields["summary"]) if "summary" in fields else None
        return Session(
            chat_id=chat_id,
            version=int(fields.get("version", 0)),
            next_seq=int(fields.get("next_seq", 0)),
            summary=summary,
            summary_tokens=int(fields.get("summary_tokens", 0)),
            messages=tuple(_decode_message(chat_id, raw) for raw in raw_messages),
        )
    except (ValueError, KeyError, TypeError) as exc:  # UnicodeDecodeError and pydantic errors included
        raise CorruptSessionError(f"chat {chat_id} holds unreadable data: {exc}") from exc
