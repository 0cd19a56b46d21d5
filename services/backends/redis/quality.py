"""ConversationLog in Redis. Per chat, one hash (the chat's slot): ``cur`` (the current conversation),
``last`` (the customer's last message), ``msg`` (its update), ``due`` (when to ask; 0 = not scheduled),
``open`` (a handoff is open; a new conversation clears it), ``ask`` ('' → asking → asked), ``private``,
``lang`` and ``c:<id>``, each conversation's record (JSON; those older than the TTL pruned at a new
conversation). Global, in one slot: the due schedule and the report's index. The chat's hash decides;
the schedule only says where to look (a worker claims an entry by moving its score past a hold, so
exactly one queues the question, and another does after a crash)."""

from __future__ import annotations

from typing import Any

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import LUA_FENCE, LUA_NOW, AnyRedis, Status, redis_errors, register
from services.core.errors import LeaseLostError
from services.core.fence import Fence, token_of
from services.core.quality import Conversation, Rating
from services.ports.quality import Ask, Rated, Started

_RECORD = (
    LUA_NOW
    + """
local function load(id)
  local raw = id and redis.call('HGET', KEYS[1], 'c:' .. id)
  if raw then return cjson.decode(raw) end
  return {started = tonumber(id) or now, first = 0, handed = 0, asked = 0, rating = '', messages = 0, private = 1}
end
local function save(id, record, ttl)
  redis.call('HSET', KEYS[1], 'c:' .. id, cjson.encode(record))
  if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
end
local function begin(private, sent, ttl)
  local id = tostring(now)
  redis.call('HSET', KEYS[1], 'cur', id, 'ask', '', 'due', 0, 'private', private, 'last', now, 'open', 0)
  if ttl > 0 then -- the records older than the TTL go (the hash itself lives as long as the chat writes)
    for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
      local at = tonumber(field:match('^c:(%d+)$') or '')
      if at and at < now - ttl then redis.call('HDEL', KEYS[1], field) end
    end
  end
  local record = load(nil)
  record.private = tonumber(private)
  if sent > 0 and sent < now then record.started = sent end -- the message's own date
  return id, record
end
"""
)

# ARGV: gap ms, private (0/1), language, ttl ms, sent ms (0: now), update ('': not known) → {started
# (0/1), conversation id, was scheduled (0/1)}. The update counted already (a redelivery): nothing.
_CUSTOMER = (
    _RECORD
    + """
local id = redis.call('HGET', KEYS[1], 'cur')
if id and ARGV[6] ~= '' and redis.call('HGET', KEYS[1], 'msg') == ARGV[6] then return {0, id, 0} end
local last = tonumber(redis.call('HGET', KEYS[1], 'last') or '0')
local started, record = 0, nil
local scheduled = tonumber(redis.call('HGET', KEYS[1], 'due') or '0') > 0 and 1 or 0
if not id or now - last >= tonumber(ARGV[1]) then
  started = 1
  id, record = begin(ARGV[2], tonumber(ARGV[5]), tonumber(ARGV[4]))
else
  record = load(id)
end
record.messages = record.messages + 1
save(id, record, tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'last', now, 'due', 0, 'lang', ARGV[3], 'msg', ARGV[6])
return {started, id, scheduled}
"""
)

# ARGV: ttl ms, update → 1 if counted. A customer message relayed to the operators: the conversation
# goes on (counted, its quiet gap starts again), nothing scheduled, never a new conversation.
_RELAYED = (
    _RECORD
    + """
local id = redis.call('HGET', KEYS[1], 'cur')
if not id or (ARGV[2] ~= '' and redis.call('HGET', KEYS[1], 'msg') == ARGV[2]) then return 0 end
local record = load(id)
record.messages = record.messages + 1
save(id, record, tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'last', now, 'msg', ARGV[2])
return 1
"""
)

# ARGV: ask after ms (0 = never), ttl ms → {first answer ms or -1, due ms or 0}.
_ANSWERED = (
    _RECORD
    + """
local id = redis.call('HGET', KEYS[1], 'cur')
if not id then return {-1, 0} end
local record, first = load(id), -1
if record.first == 0 then
  record.first = now
  first = math.max(0, now - record.started)
  save(id, record, tonumber(ARGV[2]))
end
local h = redis.call('HMGET', KEYS[1], 'ask', 'open', 'private')
local due = 0
if tonumber(ARGV[1]) > 0 and h[1] ~= 'asked' and h[2] ~= '1' and h[3] ~= '0' then due = now + tonumber(ARGV[1]) end
redis.call('HSET', KEYS[1], 'due', due)
return {first, due}
"""
)

# ARGV: ttl ms, private (0/1) → {first handoff of the conversation (0/1), conversation started (0/1), its id}.
_HANDOFF_OPENED = (
    _RECORD
    + """
local id = redis.call('HGET', KEYS[1], 'cur')
local record, started = nil, 0
if id then record = load(id) else id, record = begin(ARGV[2], 0, tonumber(ARGV[1])); started = 1 end
local first = record.handed == 0 and 1 or 0
record.handed = 1
save(id, record, tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'open', 1, 'due', 0)
return {first, started, id}
"""
)

# ARGV: ask (0/1) → due ms or 0.
_HANDOFF_ENDED = (
    LUA_NOW
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'open', 0)
local h = redis.call('HMGET', KEYS[1], 'cur', 'ask', 'private')
if ARGV[1] ~= '1' or not h[1] or h[2] == 'asked' or h[3] == '0' then return 0 end
redis.call('HSET', KEYS[1], 'due', now)
return now
"""
)

_ENDED = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HDEL', KEYS[1], 'cur'); redis.call('HSET', KEYS[1], 'due', 0) end
return 0
"""

# KEYS: hash, lease. ARGV: token → {DONE, id, language, again} | NOTHING | FENCE_LOST.
_BEGIN_ASK = (
    LUA_NOW
    + LUA_FENCE
    + """
if not holds(KEYS[2], ARGV[1]) then return FENCE_LOST end
local h = redis.call('HMGET', KEYS[1], 'cur', 'ask', 'open', 'private', 'due', 'lang')
local due = tonumber(h[5] or '0')
if not h[1] or h[2] == 'asked' or h[3] == '1' or h[4] == '0' or due == 0 or due > now then return NOTHING end
redis.call('HSET', KEYS[1], 'ask', 'asking')
return {DONE, h[1], h[6] or '', h[2] == 'asking' and 1 or 0}
"""
)

# KEYS: hash, lease. ARGV: token, conversation, ttl ms, sent (0/1) → DONE | NOTHING | FENCE_LOST. A
# question Telegram refused is never tried again, and not recorded as asked.
_ASKED = (
    _RECORD
    + LUA_FENCE
    + """
if not nobody_else_holds(KEYS[2], ARGV[1]) then return FENCE_LOST end
local h = redis.call('HMGET', KEYS[1], 'cur', 'ask')
if h[1] ~= ARGV[2] or h[2] == 'asked' then return NOTHING end
if ARGV[4] == '1' then
  local record = load(ARGV[2])
  record.asked = now
  save(ARGV[2], record, tonumber(ARGV[3]))
end
redis.call('HSET', KEYS[1], 'ask', 'asked', 'due', 0)
return DONE
"""
)

# ARGV: conversation, rating, item id, ttl ms → 'new' | 'again' | 'none' (also: never asked, a forged press).
_RATE = (
    _RECORD
    + """
local raw = redis.call('HGET', KEYS[1], 'c:' .. ARGV[1])
if not raw then return 'none' end
local record = cjson.decode(raw)
local h = redis.call('HMGET', KEYS[1], 'cur', 'ask')
if record.asked == 0 and not (h[1] == ARGV[1] and h[2] == 'asking') then return 'none' end
if record.rating ~= '' then return record.rated_by == ARGV[3] and 'again' or 'none' end
record.rating = ARGV[2]
record.rated_by = ARGV[3]
save(ARGV[1], record, tonumber(ARGV[4]))
return 'new'
"""
)

# KEYS: due. ARGV: chat, due ms, hold ms → the hold's score, or 0 (not due, moved, or held).
_CLAIM = (
    LUA_NOW
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) or tonumber(score) > now then return 0 end
local hold = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], hold, ARGV[1])
return hold
"""
)

_RELEASE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""

# KEYS: due. ARGV: limit → chat, due ms, ... (due now, oldest first).
_DUE = (
    LUA_NOW
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
"""
)

# KEYS: index. ARGV: member, ttl ms.
_INDEX = (
    LUA_NOW
    + """
redis.call('ZADD', KEYS[1], tonumber(ARGV[1]:match(':(%d+)$')), ARGV[1])
if tonumber(ARGV[2]) > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2])) end
return 0
"""
)


class RedisConversationLog:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace, ttl_seconds: int = 0) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl = max(0, int(ttl_seconds * 1000))  # 0: kept
        self._scripts = {
            name: register(redis, source)
            for name, source in {
                "customer": _CUSTOMER,
                "relayed": _RELAYED,
                "answered": _ANSWERED,
                "opened": _HANDOFF_OPENED,
                "closed": _HANDOFF_ENDED,
                "ended": _ENDED,
                "begin": _BEGIN_ASK,
                "asked": _ASKED,
                "rate": _RATE,
                "claim": _CLAIM,
                "release": _RELEASE,
                "index": _INDEX,
                "due": _DUE,
            }.items()
        }

    async def _chat(self, name: str, chat_id: int, *args: Any, fenced: bool = False) -> Any:
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot record the conversation of chat {chat_id}"):
            result = await self._scripts[name](keys=[keys.quality, keys.lease] if fenced else [keys.quality], args=args)
        if result == Status.FENCE_LOST:
            raise LeaseLostError(f"chat {chat_id}: this worker no longer holds the lease; nothing written")
        return result

    async def _schedule(self, chat_id: int, due_ms: int) -> None:
        with redis_errors("cannot schedule a feedback question"):
            if due_ms > 0:
                await self._redis.zadd(self._keys.feedback_due, {str(chat_id): due_ms})
            else:
                await self._redis.zrem(self._keys.feedback_due, str(chat_id))

    async def _index(self, chat_id: int, conversation: int) -> None:
        with redis_errors("cannot index a conversation"):
            await self._scripts["index"](keys=[self._keys.conversations], args=[f"{chat_id}:{conversation}", self._ttl])

    async def customer_message(
        self, chat_id: int, *, private: bool, language: str, gap_seconds: float, sent_ms: int = 0, item_id: str = ""
    ) -> Started:
        started, conversation, scheduled = await self._chat(
            "customer", chat_id, int(gap_seconds * 1000), int(private), language, self._ttl, sent_ms, item_id
        )
        conversation = int(conversation)
        if int(started):
            await self._index(chat_id, conversation)
        if int(scheduled):  # (the schedule's slot is asked only when there is something to take off)
            await self._schedule(chat_id, 0)
        return Started(bool(int(started)), conversation)

    async def relayed(self, chat_id: int, *, item_id: str = "") -> None:
        await self._chat("relayed", chat_id, self._ttl, item_id)

    async def answered(self, chat_id: int, *, ask_after_seconds: float) -> float | None:
        first, due = await self._chat("answered", chat_id, int(ask_after_seconds * 1000), self._ttl)
        if int(due):
            await self._schedule(chat_id, int(due))
        return int(first) / 1000 if int(first) >= 0 else None

    async def handoff_opened(self, chat_id: int, *, private: bool) -> tuple[bool, bool]:
        first, started, conversation = await self._chat("opened", chat_id, self._ttl, int(private))
        if int(started):
            await self._index(chat_id, int(conversation))
        await self._schedule(chat_id, 0)
        return bool(int(first)), bool(int(started))

    async def handoff_ended(self, chat_id: int, *, ask: bool) -> None:
        due = await self._chat("closed", chat_id, int(ask))
        if int(due):
            await self._schedule(chat_id, int(due))

    async def ended(self, chat_id: int) -> None:
        await self._chat("ended", chat_id)
        await self._schedule(chat_id, 0)

    async def due(self, limit: int = 100) -> list[tuple[int, int]]:
        with redis_errors("cannot read the feedback schedule"):
            flat = await self._scripts["due"](keys=[self._keys.feedback_due], args=[limit])
        return [(int(member), int(float(score))) for member, score in zip(flat[::2], flat[1::2], strict=True)]

    async def claim(self, chat_id: int, due_ms: int, *, hold_seconds: float) -> int | None:
        with redis_errors("cannot claim a feedback question"):
            hold = await self._scripts["claim"](
                keys=[self._keys.feedback_due], args=[str(chat_id), due_ms, int(hold_seconds * 1000)]
            )
        return int(hold) or None

    async def release(self, chat_id: int, hold: int) -> None:
        with redis_errors("cannot release a feedback question"):
            await self._scripts["release"](keys=[self._keys.feedback_due], args=[str(chat_id), hold])

    async def begin_ask(self, chat_id: int, *, fence: Fence | None = None) -> Ask | None:
        result = await self._chat("begin", chat_id, token_of(fence), fenced=True)
        if not isinstance(result, list):
            return None
        language = result[2].decode() if isinstance(result[2], bytes) else str(result[2])
        return Ask(int(result[1]), language, again=bool(int(result[3])))

    async def asked(self, chat_id: int, conversation: int, *, fence: Fence | None = None, sent: bool = True) -> bool:
        result = await self._chat("asked", chat_id, token_of(fence), conversation, self._ttl, int(sent), fenced=True)
        if int(result) != Status.DONE:
            return False
        await self._schedule(chat_id, 0)  # (once per conversation: nothing left to ask)
        return True

    async def rate(self, chat_id: int, conversation: int, rating: Rating, *, item_id: str) -> Rated:
        result = await self._chat("rate", chat_id, conversation, rating, item_id, self._ttl)
        text = result.decode() if isinstance(result, bytes) else str(result)
        return text if text in ("new", "again") else "none"  # type: ignore[return-value]

    async def conversations(self, since_ms: int) -> list[Conversation]:
        with redis_errors("cannot read the conversations"):
            members: list[Any] = await self._redis.zrangebyscore(self._keys.conversations, since_ms, "+inf")
            found: list[Conversation] = []
            for member in members:
                chat, _, started = (member.decode() if isinstance(member, bytes) else member).partition(":")
                raw = await self._redis.hget(self._keys.chat(int(chat)).quality, f"c:{started}")
                record = Conversation.from_json(int(chat), raw) if raw is not None else None
                if record is not None:
                    found.append(record)
        return found

    async def forget(self, chat_id: int) -> None:
        key = self._keys.chat(chat_id).quality
        with redis_errors(f"cannot forget the conversations of chat {chat_id}"):
            fields = [f.decode() if isinstance(f, bytes) else f for f in await self._redis.hkeys(key)]
            members = [f"{chat_id}:{f[2:]}" for f in fields if f.startswith("c:")]
            if members:
                await self._redis.zrem(self._keys.conversations, *members)
            await self._redis.zrem(self._keys.feedback_due, str(chat_id))
            await self._redis.delete(key)
