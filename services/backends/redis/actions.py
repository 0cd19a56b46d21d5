"""The action ledger in Redis (``services.ports.actions.ActionLedger``): one hash of the chat,
``actions`` (its hash slot, expiring with the session, deleted by /forget with the content keys).
Fields: ``r:<key>`` a recorded outcome (first writer wins), ``p:<id>`` a pending action, ``s:<id>`` its
state, ``x:<id>`` when it expires, ``o:<id>`` its outcome once done, ``n`` and ``l:<n>`` the actions'
lines in order, ``phone`` the shared phone number. Records are JSON; every decision is one script."""

from __future__ import annotations

import json
from typing import Any

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import LUA_FENCE, AnyRedis, Status, redis_errors, register
from services.core.actions import ActionOutcome, Customer, PendingAction, PendingState
from services.core.errors import CorruptSessionError, LeaseLostError
from services.core.fence import Fence, token_of

_LUA_LINE = """
local function add_line(key, line)
  if line ~= '' then
    local n = redis.call('HINCRBY', key, 'n', 1)
    redis.call('HSET', key, 'l:' .. n, line)
  end
end
local function keep(key, ttl)
  if tonumber(ttl) > 0 then redis.call('PEXPIRE', key, ttl) end
end
"""

# KEYS: actions, lease. ARGV: field, outcome JSON, line, ttl (ms), token.
_RECORD = (
    LUA_FENCE
    + _LUA_LINE
    + """
if not holds(KEYS[2], ARGV[5]) then return FENCE_LOST end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then add_line(KEYS[1], ARGV[3]) end
keep(KEYS[1], ARGV[4])
return DONE
"""
)

# KEYS: actions, lease. ARGV: id, pending JSON, expires (s), ttl (ms), token.
_PUT_PENDING = (
    LUA_FENCE
    + _LUA_LINE
    + """
if not holds(KEYS[2], ARGV[5]) then return FENCE_LOST end
if redis.call('HSETNX', KEYS[1], 'p:' .. ARGV[1], ARGV[2]) == 1 then
  redis.call('HSET', KEYS[1], 's:' .. ARGV[1], 'pending', 'x:' .. ARGV[1], ARGV[3])
end
keep(KEYS[1], ARGV[4])
return DONE
"""
)

# KEYS: actions. ARGV: id, state, now (s). → the pending JSON when this call moved it, else false.
_DECIDE = """
if redis.call('HGET', KEYS[1], 's:' .. ARGV[1]) ~= 'pending' then return false end
if ARGV[2] ~= 'expired' and tonumber(ARGV[3]) > tonumber(redis.call('HGET', KEYS[1], 'x:' .. ARGV[1])) then
  return false
end
redis.call('HSET', KEYS[1], 's:' .. ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[1], 'p:' .. ARGV[1])
"""

# KEYS: actions. ARGV: id, outcome JSON, line, ttl (ms).
_FINISH = (
    _LUA_LINE
    + """
local state = redis.call('HGET', KEYS[1], 's:' .. ARGV[1])
if not state or state == 'done' then return NOTHING end
redis.call('HSET', KEYS[1], 's:' .. ARGV[1], 'done', 'o:' .. ARGV[1], ARGV[2])
add_line(KEYS[1], ARGV[3])
keep(KEYS[1], ARGV[4])
return DONE
"""
)

# KEYS: actions. ARGV: phone, ttl (ms).
_SET_PHONE = _LUA_LINE + "redis.call('HSET', KEYS[1], 'phone', ARGV[1])\nkeep(KEYS[1], ARGV[2])\nreturn DONE\n"

_DECIDABLE = frozenset({"confirmed", "approved", "declined", "expired"})


def outcome_json(outcome: ActionOutcome) -> str:
    fields = {
        "kind": outcome.kind,
        "note": outcome.note,
        "data": outcome.data,
        "status": outcome.status,
        "seconds": outcome.seconds,
        "idempotency_key": outcome.idempotency_key,
        "line": outcome.line,
    }
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


def outcome_of(raw: str | bytes) -> ActionOutcome:
    data: dict[str, Any] = json.loads(raw)
    return ActionOutcome(
        kind=data["kind"],
        note=str(data["note"]),
        data=data.get("data"),
        status=data.get("status"),
        seconds=float(data.get("seconds") or 0.0),
        idempotency_key=data.get("idempotency_key"),
        line=str(data.get("line") or ""),
    )


def pending_json(pending: PendingAction) -> str:
    fields = {
        "action_id": pending.action_id,
        "chat_id": pending.chat_id,
        "tool": pending.tool,
        "risk": pending.risk,
        "arguments": pending.arguments,
        "prompt": pending.prompt,
        "idempotency_key": pending.idempotency_key,
        "created": pending.created,
        "expires": pending.expires,
        "customer": {"telegram_id": pending.customer.telegram_id, "phone": pending.customer.phone},
        "extra": pending.extra,
    }
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


def pending_of(raw: str | bytes, state: str, result: str | bytes | None) -> PendingAction:
    data: dict[str, Any] = json.loads(raw)
    customer = data["customer"]
    return PendingAction(
        action_id=str(data["action_id"]),
        chat_id=int(data["chat_id"]),
        tool=str(data["tool"]),
        risk=data["risk"],
        arguments=dict(data["arguments"]),
        prompt=str(data["prompt"]),
        idempotency_key=str(data["idempotency_key"]),
        created=float(data["created"]),
        expires=float(data["expires"]),
        customer=Customer(int(customer["telegram_id"]), customer.get("phone")),
        state=state,  # type: ignore[arg-type]
        result=outcome_of(result) if result is not None else None,
        extra=dict(data.get("extra") or {}),
    )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisActionLedger:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace, ttl_seconds: float = 0) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_ms = max(0, int(ttl_seconds * 1000))
        self._record = register(redis, _RECORD)
        self._put = register(redis, _PUT_PENDING)
        self._decide = register(redis, _DECIDE)
        self._finish = register(redis, _FINISH)
        self._set_phone = register(redis, _SET_PHONE)

    def _key(self, chat_id: int) -> str:
        return self._keys.chat(chat_id).actions

    async def _fenced(self, script: Any, chat_id: int, args: list[Any], fence: Fence | None) -> None:
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot write the actions of chat {chat_id}"):
            result = await script(keys=[keys.actions, keys.lease], args=[*args, self._ttl_ms, token_of(fence)])
        if result == Status.FENCE_LOST:
            raise LeaseLostError(f"chat {chat_id}: its lease is lost; the action record is not written")

    async def recorded(self, chat_id: int, key: str) -> ActionOutcome | None:
        with redis_errors(f"cannot read the actions of chat {chat_id}"):
            raw = await self._redis.hget(self._key(chat_id), f"r:{key}")
        return self._decoded(chat_id, outcome_of, raw) if raw is not None else None

    async def record(self, chat_id: int, key: str, outcome: ActionOutcome, *, fence: Fence | None = None) -> None:
        await self._fenced(self._record, chat_id, [f"r:{key}", outcome_json(outcome), outcome.line], fence)

    async def put_pending(self, pending: PendingAction, *, fence: Fence | None = None) -> None:
        args = [pending.action_id, pending_json(pending), repr(pending.expires)]
        await self._fenced(self._put, pending.chat_id, args, fence)

    async def pending(self, chat_id: int, action_id: str) -> PendingAction | None:
        fields = [f"p:{action_id}", f"s:{action_id}", f"o:{action_id}"]
        with redis_errors(f"cannot read the actions of chat {chat_id}"):
            raw, state, result = await self._redis.hmget(self._key(chat_id), fields)
        if raw is None or state is None:
            return None
        found: PendingAction = self._decoded(chat_id, lambda r: pending_of(r, _text(state), result), raw)
        return found

    async def open_pending(self, chat_id: int) -> list[PendingAction]:
        with redis_errors(f"cannot read the actions of chat {chat_id}"):
            fields = {_text(k): v for k, v in (await self._redis.hgetall(self._key(chat_id))).items()}
        found = [
            self._decoded(chat_id, lambda r: pending_of(r, "pending", None), fields[f"p:{name[2:]}"])
            for name, state in fields.items()
            if name.startswith("s:") and _text(state) == "pending" and f"p:{name[2:]}" in fields
        ]
        return sorted(found, key=lambda p: p.created)

    async def decide(self, chat_id: int, action_id: str, state: PendingState, *, now: float) -> PendingAction | None:
        if state not in _DECIDABLE:
            return None
        with redis_errors(f"cannot decide an action of chat {chat_id}"):
            raw = await self._decide(keys=[self._key(chat_id)], args=[action_id, state, repr(now)])
        return self._decoded(chat_id, lambda r: pending_of(r, state, None), raw) if raw else None

    async def finish(self, chat_id: int, action_id: str, outcome: ActionOutcome) -> None:
        args = [action_id, outcome_json(outcome), outcome.line, self._ttl_ms]
        with redis_errors(f"cannot finish an action of chat {chat_id}"):
            await self._finish(keys=[self._key(chat_id)], args=args)

    async def lines(self, chat_id: int) -> list[str]:
        with redis_errors(f"cannot read the actions of chat {chat_id}"):
            fields = {_text(k): _text(v) for k, v in (await self._redis.hgetall(self._key(chat_id))).items()}
        numbered = [
            (int(name[2:]), line) for name, line in fields.items() if name.startswith("l:") and name[2:].isdigit()
        ]
        return [line for _, line in sorted(numbered)]

    async def set_phone(self, chat_id: int, phone: str) -> None:
        with redis_errors(f"cannot store the phone of chat {chat_id}"):
            await self._set_phone(keys=[self._key(chat_id)], args=[phone, self._ttl_ms])

    async def phone(self, chat_id: int) -> str | None:
        with redis_errors(f"cannot read the actions of chat {chat_id}"):
            raw = await self._redis.hget(self._key(chat_id), "phone")
        return _text(raw) if raw is not None else None

    async def forget(self, chat_id: int) -> None:
        with redis_errors(f"cannot delete the actions of chat {chat_id}"):
            await self._redis.delete(self._key(chat_id))

    @staticmethod
    def _decoded(chat_id: int, decode: Any, raw: Any) -> Any:
        try:
            return decode(raw)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptSessionError(f"chat {chat_id} holds an unreadable action record: {exc}") from exc
