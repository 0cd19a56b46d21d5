"""Durable per-chat work queue on Redis: any worker serves any chat, one chat at a time, in order.

Design (documented in the README, "Scaling"):

* each chat has an inbox (``<prefix>:{chat:<id>}:inbox``, a sorted set ordered by the item's order key,
  e.g. the Telegram update id, so items taken in by different workers still come out in the sender's
  order) and a set of item ids already taken in (``…:seen``), so a redelivered item is stored once;
  ``enqueue`` returns only after both are written;
* a global sorted set ``<prefix>:ready`` holds the chats that may have work, scored by when they are
  due (Redis server time, ms);
* a worker ``claim``s the first due chat: the script pushes its score one lease into the future (a
  watchdog entry), then the worker takes the chat's lease (``…:lease``, SET NX PX). It processes the
  inbox head, ``ack``s it (LPOP, only while it still holds the lease) and goes on until the inbox is
  empty, then ``release``s the lease (atomically with the emptiness check) and drops its watchdog;
* a heartbeat ``renew``s the lease and the watchdog while a (slow) item is processed; if the worker
  dies, the lease expires and the watchdog makes the chat due again, so another worker takes over
  within one lease;
* every script touches the keys of one chat only (hash tag ``{chat:<id>}``) or global keys only, so
  the same scripts run on Redis Cluster.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.errors import StoreError

SEEN_KEPT = 5000
"""How many recent item ids per chat are remembered to recognise redeliveries."""

_NOW = "local t = redis.call('TIME'); local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

# KEYS: inbox, seen. ARGV: item_id, item_json, ttl_seconds, order. → 1 new, 0 already seen
_ENQUEUE = (
    _NOW
    + """
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -SEEN_KEPT - 1)
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then redis.call('EXPIRE', KEYS[1], ttl); redis.call('EXPIRE', KEYS[2], ttl) end
return 1
""".replace("SEEN_KEPT", str(SEEN_KEPT))
)

# KEYS: ready. ARGV: chat member. Make the chat due now (never postpones an earlier due time).
_MARK_READY = (
    _NOW
    + """
redis.call('ZADD', KEYS[1], 'LT', now, ARGV[1])
return now
"""
)

# KEYS: ready. ARGV: lease_ms. → {member, watchdog_score} or nil
_CLAIM = (
    _NOW
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if #due == 0 then return nil end
local watchdog = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], 'XX', watchdog, due[1])
return {due[1], watchdog}
"""
)

# KEYS: lease. ARGV: token, lease_ms.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""

# KEYS: lease, ready. ARGV: token, lease_ms, member. → new watchdog score, or 0 if the lease is lost
_RENEW_LEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: ready. ARGV: member, lease_ms → push the watchdog (only later, only if present)
_PUSH_WATCHDOG = (
    _NOW
    + """
local watchdog = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', 'GT', watchdog, ARGV[1])
return watchdog
"""
)

# KEYS: lease, inbox. ARGV: token, head prefix ('{"id":"<item id>",'). → 1 acked, 0 head is another
# item, -1 lease lost
_ACK = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if not head then return 0 end
if string.sub(head, 1, #ARGV[2]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[2], head)
return 1
"""

# KEYS: lease, inbox. ARGV: token. → 1 released (inbox empty), 0 still work, -1 lease lost
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('ZCARD', KEYS[2]) > 0 then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS: ready. ARGV: member, watchdog score. Drop the watchdog unless new work moved the score.
_DROP_WATCHDOG = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]); return 1 end
return 0
"""

# KEYS: lease. ARGV: token.
_DROP_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: ready. → {depth_due, oldest_due_age_ms}
_STATS = (
    _NOW
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
local count = redis.call('ZCOUNT', KEYS[1], '-inf', now)
if #due == 0 then return {count, 0} end
return {count, now - tonumber(due[2])}
"""
)


@dataclass(frozen=True, slots=True)
class QueueItem:
    id: str
    payload: str
    enqueued_ms: int


@dataclass(slots=True)
class Claim:
    """A chat this worker holds the lease of."""

    chat_id: int
    token: str
    watchdog: int


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class ChatWorkQueue:
    def __init__(
        self, *, redis: Redis, key_prefix: str = "sb", lease_ms: int = 30_000, ttl_seconds: int = 7 * 24 * 3600
    ) -> None:
        self._redis = redis
        self._prefix = key_prefix
        self.lease_ms = lease_ms
        self._ttl = ttl_seconds
        self.ready_key = f"{key_prefix}:ready"
        self.wake_key = f"{key_prefix}:wake"
        self._enqueue = redis.register_script(_ENQUEUE)
        self._mark_ready = redis.register_script(_MARK_READY)
        self._claim = redis.register_script(_CLAIM)
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW_LEASE)
        self._push_watchdog = redis.register_script(_PUSH_WATCHDOG)
        self._ack = redis.register_script(_ACK)
        self._release = redis.register_script(_RELEASE)
        self._drop_watchdog = redis.register_script(_DROP_WATCHDOG)
        self._drop_lease = redis.register_script(_DROP_LEASE)
        self._stats = redis.register_script(_STATS)

    def _keys(self, chat_id: int) -> dict[str, str]:
        tag = f"{self._prefix}:{{chat:{chat_id}}}"
        return {"inbox": f"{tag}:inbox", "seen": f"{tag}:seen", "lease": f"{tag}:lease"}

    async def enqueue(self, chat_id: int, item_id: str, payload: str, *, order: int) -> bool:
        """Store an item durably; True if new, False if this id was already taken in. Items of a chat
        come out by ascending ``order``. Either way the chat is marked due, so a crash between the two
        steps heals on the sender's redelivery."""
        keys = self._keys(chat_id)
        item = json.dumps(
            {"id": item_id, "t": int(time.time() * 1000), "p": payload}, ensure_ascii=False, separators=(",", ":")
        )
        try:
            new = await self._enqueue(keys=[keys["inbox"], keys["seen"]], args=[item_id, item, self._ttl, order])
            await self._mark_ready(keys=[self.ready_key], args=[str(chat_id)])
            await self._redis.lpush(self.wake_key, "1")
            await self._redis.ltrim(self.wake_key, 0, 999)
        except RedisError as exc:
            raise StoreError(f"cannot enqueue for chat {chat_id}: {type(exc).__name__}") from exc
        return bool(new)

    async def claim(self, token: str) -> Claim | None:
        """Take the first due chat whose lease is free, or None."""
        result = await self._claim(keys=[self.ready_key], args=[self.lease_ms])
        if not result:
            return None
        member, watchdog = result
        chat_id = int(member)
        acquired = await self._acquire(keys=[self._keys(chat_id)["lease"]], args=[token, self.lease_ms])
        if not acquired:
            return None  # another worker holds it; the watchdog brings it back when its lease could expire
        return Claim(chat_id, token, int(watchdog))

    async def wait_for_work(self, seconds: float) -> None:
        """Block until something was enqueued (or ``seconds`` pass). Needs its own connection."""
        await self._redis.blpop([self.wake_key], timeout=seconds)

    async def head(self, claim: Claim) -> QueueItem | None:
        head = await self._redis.zrange(self._keys(claim.chat_id)["inbox"], 0, 0)
        if not head:
            return None
        data = json.loads(cast(bytes, head[0]))
        return QueueItem(id=data["id"], payload=data["p"], enqueued_ms=int(data.get("t", 0)))

    async def renew(self, claim: Claim) -> bool:
        """Extend the lease and the watchdog; False if the lease was lost."""
        keys = self._keys(claim.chat_id)
        if not await self._renew(keys=[keys["lease"]], args=[claim.token, self.lease_ms]):
            return False
        claim.watchdog = int(await self._push_watchdog(keys=[self.ready_key], args=[str(claim.chat_id), self.lease_ms]))
        return True

    async def ack(self, claim: Claim, item_id: str) -> bool:
        """Remove the processed head item; False if the lease was lost (another worker owns the chat)."""
        keys = self._keys(claim.chat_id)
        prefix = json.dumps({"id": item_id}, separators=(",", ":"))[:-1] + ","
        status = int(await self._ack(keys=[keys["lease"], keys["inbox"]], args=[claim.token, prefix]))
        return status >= 0

    async def release(self, claim: Claim) -> bool:
        """Give the chat up if its inbox is empty. False means: more work arrived, keep going."""
        keys = self._keys(claim.chat_id)
        status = int(await self._release(keys=[keys["lease"], keys["inbox"]], args=[claim.token]))
        if status == 0:
            return False
        await self._drop_watchdog(keys=[self.ready_key], args=[str(claim.chat_id), claim.watchdog])
        return True

    async def hand_back(self, claim: Claim) -> None:
        """Give the chat up with work left (graceful stop): another worker takes it at once."""
        await self._drop_lease(keys=[self._keys(claim.chat_id)["lease"]], args=[claim.token])
        await self._mark_ready(keys=[self.ready_key], args=[str(claim.chat_id)])
        await self._redis.lpush(self.wake_key, "1")

    async def stats(self) -> tuple[int, float]:
        """(chats due now, age in seconds of the longest-waiting due chat)."""
        count, age_ms = await self._stats(keys=[self.ready_key])
        return int(count), int(age_ms) / 1000

    async def forget(self, chat_id: int) -> None:
        """Delete the chat's dedup records (its inbox and lease stay: work in flight must finish)."""
        await self._redis.delete(self._keys(chat_id)["seen"])
