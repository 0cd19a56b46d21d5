"""Handoff records in Redis (``services.ports.handoffs.HandoffStore``).

Per chat (hash tag ``{chat:<id>}``, so with the session): ``handoff`` (hash), ``handoff_log`` (the
transcript) and ``handoff_relayed`` (message ids already relayed). Every write there is one Lua script
fenced by the chat's lease. Global (hash tag ``{<ns>:handoff}``, one slot of its own): (group, topic) → chat,
the open handoffs and their reply deadlines; those scripts touch nothing else. The bot writes the
per-chat record and the global keys in separate steps, ordered so that a crash in between leaves a
state the next attempt completes (every global write is idempotent)."""

from __future__ import annotations

from typing import Any

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import LUA_FENCE, LUA_NOW, AnyRedis, Status, redis_errors, register
from services.core.errors import CorruptSessionError, LeaseLostError
from services.core.fence import Fence, token_of
from services.core.handoff_records import (
    NEEDS_OPEN,
    RELAYED_IDS_KEPT,
    TRANSCRIPT_KEPT,
    Handoff,
    Recorded,
    TranscriptEntry,
)
from services.ports.handoffs import RelayState

_EXPIRE = """
local function expire_all(ttl, keys)
  if ttl > 0 then for _, key in ipairs(keys) do redis.call('EXPIRE', key, ttl) end end
end
"""

# KEYS: handoff, lease. ARGV: topic, ttl, token, group.
_SET_TOPIC = (
    _EXPIRE
    + LUA_FENCE
    + """
if not holds(KEYS[2], ARGV[3]) then return FENCE_LOST end
redis.call('HSET', KEYS[1], 'topic', ARGV[1], 'group', ARGV[4])
expire_all(tonumber(ARGV[2]), {KEYS[1]})
return DONE
"""
)

# KEYS: handoff, handoff_log, lease. ARGV: reason, trigger, language, ttl, token, item id (opened_by).
_OPEN = (
    LUA_NOW
    + _EXPIRE
    + LUA_FENCE
    + """
if not holds(KEYS[3], ARGV[5]) then return FENCE_LOST end
if redis.call('HGET', KEYS[1], 'state') == 'open' then return NOTHING end
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[1], 'first_reply', 'flagged', 'closed_by')
redis.call('HSET', KEYS[1], 'state', 'open', 'reason', ARGV[1], 'trigger', ARGV[2], 'language', ARGV[3], 'opened', now,
  'opened_by', ARGV[6])
expire_all(tonumber(ARGV[4]), {KEYS[1]})
return DONE
"""
)

# KEYS: handoff, handoff_log, handoff_relayed, lease. ARGV: item id, entry JSON ('' = a relay mark
# only), is operator, ttl, token, needs open ('1': a message or note, written only while the handoff
# is open; '0': the ticket or a mark, written while the record exists; never after /forget).
# Returns {DONE, first reply latency ms or -1} | {NOTHING, -1} already relayed or not open | {FENCE_LOST, -1}.
_RECORD = (
    LUA_NOW
    + _EXPIRE
    + LUA_FENCE
    + """
if not holds(KEYS[4], ARGV[5]) then return {FENCE_LOST, -1} end
local state = redis.call('HGET', KEYS[1], 'state')
if not state and redis.call('EXISTS', KEYS[1]) == 0 then return {NOTHING, -1} end
if ARGV[6] == '1' and state ~= 'open' then return {NOTHING, -1} end
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then return {NOTHING, -1} end
redis.call('ZREM', KEYS[3], '~' .. ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -RELAYED_IDS_KEPT - 1)
if ARGV[2] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  redis.call('LTRIM', KEYS[2], -TRANSCRIPT_KEPT, -1)
end
local first = -1
if ARGV[3] == '1' and not redis.call('HGET', KEYS[1], 'first_reply') then
  redis.call('HSET', KEYS[1], 'first_reply', now)
  first = now - (tonumber(redis.call('HGET', KEYS[1], 'opened') or now) or now)
end
expire_all(tonumber(ARGV[4]), {KEYS[1], KEYS[2], KEYS[3]})
return {DONE, first}
""".replace("RELAYED_IDS_KEPT", str(RELAYED_IDS_KEPT)).replace("TRANSCRIPT_KEPT", str(TRANSCRIPT_KEPT))
)

# KEYS: handoff_relayed, lease, handoff. ARGV: item id, ttl, token. "~<id>": a copy of <id> began.
# Nothing is written once the record is gone (/forget).
_BEGIN = (
    LUA_NOW
    + _EXPIRE
    + LUA_FENCE
    + """
if not holds(KEYS[2], ARGV[3]) then return FENCE_LOST end
if redis.call('EXISTS', KEYS[3]) == 0 then return NOTHING end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then redis.call('ZADD', KEYS[1], now, '~' .. ARGV[1]) end
expire_all(tonumber(ARGV[2]), {KEYS[1]})
return DONE
"""
)

# KEYS: handoff_relayed. ARGV: item id. → {done score or false, started score or false}
_RELAY_STATE = """
return {redis.call('ZSCORE', KEYS[1], ARGV[1]), redis.call('ZSCORE', KEYS[1], '~' .. ARGV[1])}
"""

# KEYS: handoff, lease. ARGV: token. Only while open, only once.
_FLAG = (
    LUA_FENCE
    + """
if not holds(KEYS[2], ARGV[1]) then return FENCE_LOST end
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return NOTHING end
if redis.call('HGET', KEYS[1], 'flagged') then return NOTHING end
redis.call('HSET', KEYS[1], 'flagged', '1')
return DONE
"""
)

# KEYS: handoff, handoff_log, lease. ARGV: token, item id (closed_by). Only while open; the transcript
# goes with it (folded into the summary before, when it is kept).
_CLOSE = (
    LUA_FENCE
    + """
if not holds(KEYS[3], ARGV[1]) then return FENCE_LOST end
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return NOTHING end
redis.call('HSET', KEYS[1], 'state', 'closed', 'closed_by', ARGV[2])
redis.call('DEL', KEYS[2])
return DONE
"""
)

# KEYS: handoff, handoff_log. ARGV: '1' with the transcript. → {hash as a flat list, transcript}
_GET = """
local log = {}
if ARGV[1] == '1' then log = redis.call('LRANGE', KEYS[2], 0, -1) end
return {redis.call('HGETALL', KEYS[1]), log}
"""

# KEYS: open, deadlines. ARGV: chat, open (1/0, '' = unchanged), seconds ('' = no deadline).
_TRACK = (
    LUA_NOW
    + """
if ARGV[2] == '1' then redis.call('SADD', KEYS[1], ARGV[1])
elseif ARGV[2] == '0' then redis.call('SREM', KEYS[1], ARGV[1]) end
if ARGV[3] == '' then redis.call('ZREM', KEYS[2], ARGV[1])
else redis.call('ZADD', KEYS[2], now + math.floor(tonumber(ARGV[3]) * 1000), ARGV[1]) end
return DONE
"""
)

# KEYS: deadlines. ARGV: limit.
_DUE = (
    LUA_NOW
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
"""
)

# KEYS: topics, open, deadlines. ARGV: chat, "<group>:<topic>" ('' = none).
_UNBIND = """
if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], ARGV[2]) == ARGV[1] then redis.call('HDEL', KEYS[1], ARGV[2]) end
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return DONE
"""


class RedisHandoffStore:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace, ttl_seconds: int = 0) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl = ttl_seconds
        self._set_topic = register(redis, _SET_TOPIC)
        self._open = register(redis, _OPEN)
        self._record = register(redis, _RECORD)
        self._flag = register(redis, _FLAG)
        self._close = register(redis, _CLOSE)
        self._get = register(redis, _GET)
        self._begin = register(redis, _BEGIN)
        self._relay_state = register(redis, _RELAY_STATE)
        self._track = register(redis, _TRACK)
        self._due = register(redis, _DUE)
        self._unbind = register(redis, _UNBIND)

    async def _run(self, chat_id: int, script: Any, keys: list[str], args: list[Any]) -> Any:
        with redis_errors(f"cannot write the handoff of chat {chat_id}"):
            result = await script(keys=keys, args=args)
        status = result[0] if isinstance(result, list) else result
        if int(status) == Status.FENCE_LOST:
            raise LeaseLostError(f"chat {chat_id}: this worker no longer holds the lease; nothing written")
        return result

    async def get(self, chat_id: int, *, transcript: bool = True) -> Handoff:
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot read the handoff of chat {chat_id}"):
            flat, log = await self._get(keys=[keys.handoff, keys.handoff_log], args=["1" if transcript else "0"])
        try:
            fields = {_text(k): _text(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}
            if not fields:
                return Handoff()
            state = fields.get("state", "none")
            return Handoff(
                state=state if state in ("open", "closed") else "none",  # type: ignore[arg-type]
                topic_id=int(fields["topic"]) if fields.get("topic") else None,
                topic_group=int(fields["group"]) if fields.get("group") else None,
                reason=fields.get("reason", ""),
                trigger=fields.get("trigger", ""),
                language=fields.get("language", ""),
                opened_ms=int(fields.get("opened", 0)),
                first_reply_ms=int(fields.get("first_reply", 0)),
                flagged=bool(fields.get("flagged")),
                opened_by=fields.get("opened_by", ""),
                closed_by=fields.get("closed_by", ""),
                transcript=tuple(TranscriptEntry.from_json(raw) for raw in log),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptSessionError(f"chat {chat_id} holds an unreadable handoff record: {exc}") from exc

    async def set_topic(self, chat_id: int, group_id: int, topic_id: int, *, fence: Fence | None = None) -> None:
        keys = self._keys.chat(chat_id)
        args = [topic_id, self._ttl, token_of(fence), group_id]
        await self._run(chat_id, self._set_topic, [keys.handoff, keys.lease], args)

    async def start(
        self, chat_id: int, *, reason: str, trigger: str, language: str, item_id: str = "", fence: Fence | None = None
    ) -> bool:
        keys = self._keys.chat(chat_id)
        args = [reason[:1000], trigger, language, self._ttl, token_of(fence), item_id]
        return (
            int(await self._run(chat_id, self._open, [keys.handoff, keys.handoff_log, keys.lease], args)) == Status.DONE
        )

    async def record(
        self, chat_id: int, item_id: str, entry: TranscriptEntry | None, *, fence: Fence | None = None
    ) -> Recorded:
        keys = self._keys.chat(chat_id)
        args = [
            item_id,
            entry.to_json() if entry is not None else "",
            "1" if entry is not None and entry.who == "operator" else "0",
            self._ttl,
            token_of(fence),
            "1" if entry is not None and entry.who in NEEDS_OPEN else "0",
        ]
        status, first = await self._run(
            chat_id, self._record, [keys.handoff, keys.handoff_log, keys.handoff_relayed, keys.lease], args
        )
        return Recorded(
            new=int(status) == Status.DONE, first_reply_seconds=int(first) / 1000 if int(first) >= 0 else None
        )

    async def begin_relay(self, chat_id: int, item_id: str, *, fence: Fence | None = None) -> None:
        keys = self._keys.chat(chat_id)
        script_keys = [keys.handoff_relayed, keys.lease, keys.handoff]
        await self._run(chat_id, self._begin, script_keys, [item_id, self._ttl, token_of(fence)])

    async def relay_state(self, chat_id: int, item_id: str) -> RelayState:
        with redis_errors(f"cannot read the handoff of chat {chat_id}"):
            done, started = await self._relay_state(keys=[self._keys.chat(chat_id).handoff_relayed], args=[item_id])
        return "done" if done is not None else "started" if started is not None else "new"

    async def flag(self, chat_id: int, *, fence: Fence | None = None) -> bool:
        keys = self._keys.chat(chat_id)
        return int(await self._run(chat_id, self._flag, [keys.handoff, keys.lease], [token_of(fence)])) == Status.DONE

    async def end(self, chat_id: int, *, item_id: str = "", fence: Fence | None = None) -> bool:
        keys = self._keys.chat(chat_id)
        script_keys = [keys.handoff, keys.handoff_log, keys.lease]
        return int(await self._run(chat_id, self._close, script_keys, [token_of(fence), item_id])) == Status.DONE

    async def bind_topic(self, group_id: int, topic_id: int, chat_id: int) -> None:
        with redis_errors("cannot bind a handoff topic"):
            await self._redis.hset(self._keys.handoff_topics, _topic_field(group_id, topic_id), str(chat_id))

    async def chat_of_topic(self, group_id: int, topic_id: int) -> int | None:
        with redis_errors("cannot read the handoff topics"):
            raw = await self._redis.hget(self._keys.handoff_topics, _topic_field(group_id, topic_id))
        return int(raw) if raw is not None else None

    async def track(self, chat_id: int, *, open: bool | None, reply_within: float | None = None) -> None:
        flag = "" if open is None else "1" if open else "0"
        args = [chat_id, flag, "" if reply_within is None else repr(float(reply_within))]
        with redis_errors("cannot track a handoff"):
            await self._track(keys=[self._keys.handoff_open, self._keys.handoff_deadlines], args=args)

    async def due(self, limit: int = 100) -> list[int]:
        with redis_errors("cannot read the handoff deadlines"):
            members = await self._due(keys=[self._keys.handoff_deadlines], args=[limit])
        return [int(m) for m in members]

    async def open_count(self) -> int:
        with redis_errors("cannot count the open handoffs"):
            return int(await self._redis.scard(self._keys.handoff_open))

    async def unbind(self, chat_id: int, group_id: int | None, topic_id: int | None) -> None:
        keys = [self._keys.handoff_topics, self._keys.handoff_open, self._keys.handoff_deadlines]
        field = "" if group_id is None or topic_id is None else _topic_field(group_id, topic_id)
        with redis_errors("cannot unbind a handoff topic"):
            await self._unbind(keys=keys, args=[chat_id, field])


def _topic_field(group_id: int, topic_id: int) -> str:
    """Topic ids repeat between groups: a binding is keyed by both."""
    return f"{group_id}:{topic_id}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
