"""Durable per-chat work queue on Redis: any worker serves any chat, one chat at a time, in order.

A chat's inbox is ordered by Telegram update id (items taken in by different workers come out in the
sender's order) and kept until processed or dead-lettered; a ``seen`` set stores a redelivery once. The
``ready`` set holds the chats that may have work, by when they are due. ``claim`` takes a due chat's
lease and pushes its score one lease ahead (a watchdog, for a worker that dies); ``next`` acks an item
and returns the next or releases the lease. Every per-chat step is fenced by the lease; every script
touches one chat's keys or one global key (Redis Cluster); the Lua is in ``queue_scripts``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from typing import Literal, cast

from services.backends.redis import queue_scripts as lua
from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis, Status, redis_errors, register
from services.core.errors import StoreUnavailableError
from services.ports.queue import Claim, QueueItem, Step, Taken


def encode_item(item_id: str, payload: str) -> str:
    """An inbox entry: its id first (scripts read it), the time taken in, the payload."""
    return json.dumps({"id": item_id, "t": int(time.time() * 1000), "p": payload}, separators=(",", ":"))


class RedisWorkQueue:
    """The per-chat work queue. Redis errors surface as StoreUnavailableError (transient)."""

    def __init__(
        self, *, redis: AnyRedis, keys: KeySpace | None = None, lease_ms: int = 30_000, ttl_seconds: int = 0
    ) -> None:
        self._redis = redis
        self._keys = keys or KeySpace()
        self.lease_ms = lease_ms
        self._seen_ttl = max(ttl_seconds, 0)
        self._replied_ttl = max(ttl_seconds, 0)  # the session's, as the store's own reply marks
        self._enqueue = register(redis, lua.ENQUEUE)
        self._enqueue_take = register(redis, lua.ENQUEUE_TAKE)
        self._watch = register(redis, lua.WATCH)
        self._mark_ready = register(redis, lua.MARK_READY)
        self._claim = register(redis, lua.CLAIM)
        self._next = register(redis, lua.NEXT)
        self._note = register(redis, lua.NOTE)
        self._given_up = register(redis, lua.GIVEN_UP)
        self._defer = register(redis, lua.DEFER)
        self._renew = register(redis, lua.RENEW_LEASE)
        self._push_watchdog = register(redis, lua.PUSH_WATCHDOG)
        self._drop_watchdog = register(redis, lua.DROP_WATCHDOG)
        self._drop_lease = register(redis, lua.DROP_LEASE)
        self._stats = register(redis, lua.STATS)

    async def enqueue(self, chat_id: int, item_id: str, payload: str, *, order: int) -> bool:
        """Store an item durably; True if new, False if this id was already taken in. Items of a chat
        come out by ascending ``order``. Either way the chat is marked due, so a crash between the two
        steps heals on the sender's redelivery."""
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot enqueue for chat {chat_id}"):
            new = await self._enqueue(
                keys=[keys.inbox, keys.seen], args=[item_id, encode_item(item_id, payload), self._seen_ttl, order]
            )
            await self._make_due(chat_id)
        return bool(new)

    async def enqueue_and_take(self, chat_id: int, item_id: str, payload: str, *, order: int, token: str) -> Taken:
        """Store an item once and, when nobody holds its chat, take the chat's lease for the caller: the
        caller serves the chat without a trip through the ready set. The chat's watchdog (as a claim has)
        is written first, so a failure leaves nothing held and counts no attempt. When the chat is held,
        it is marked due as ``enqueue`` does."""
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot enqueue for chat {chat_id}"):
            watchdog = int(float(await self._watch(keys=[self._keys.ready], args=[str(chat_id), self.lease_ms])))
            result = await self._enqueue_take(
                keys=[keys.inbox, keys.seen, keys.lease, keys.attempts],
                args=[item_id, encode_item(item_id, payload), self._seen_ttl, order, token, self.lease_ms],
            )
            new, status = bool(int(result[0])), int(result[1])
            if status == Status.BUSY:
                await self._make_due(chat_id)
                return Taken(new)
        if status == Status.NOTHING:  # processed before: released at once, its watchdog goes too
            with contextlib.suppress(StoreUnavailableError), redis_errors("cannot drop a watchdog"):
                await self._drop_watchdog(keys=[self._keys.ready], args=[str(chat_id), watchdog])
            return Taken(new)
        claim = Claim(chat_id, token, watchdog, others_due=False)
        return Taken(new, claim, Step("item", _decode_item(result[1:])))

    async def _make_due(self, chat_id: int) -> None:
        await self._mark_ready(keys=[self._keys.ready, self._keys.wake], args=[str(chat_id)])

    async def claim(self, token: str) -> Claim | None:
        """The first due chat (its lease is taken by the first ``next(acquire=True)``), or None."""
        with redis_errors("cannot claim"):
            result = await self._claim(keys=[self._keys.ready], args=[self.lease_ms])
        if not result:
            return None
        member, watchdog, others = result
        return Claim(int(member), token, int(watchdog), others_due=bool(others))

    async def next(
        self, claim: Claim, *, done: QueueItem | None = None, acquire: bool = False, replied: Sequence[str] = ()
    ) -> Step:
        """Acknowledge ``done`` (processed or dead-lettered) and mark ``replied``, then return the next
        item; release the chat when its inbox is empty. All of it only while ``claim`` holds the lease."""
        keys = self._keys.chat(claim.chat_id)
        done_member: bytes | str = done.member if done else ""
        args: list[bytes | str | int | float] = [claim.token, self.lease_ms, "1" if acquire else "0", done_member]
        args.append(done.id if done else "")
        args += self._replied_args(replied)
        with redis_errors(f"chat {claim.chat_id}: queue step failed"):
            result = await self._next(keys=[keys.lease, keys.inbox, keys.attempts, keys.replied], args=args)
            status = int(result[0])
            if status == Status.NOTHING:
                await self._drop_watchdog(keys=[self._keys.ready], args=[str(claim.chat_id), claim.watchdog])
                return Step("released")
            if status == Status.LEASE_LOST:
                # whoever holds the chat now (or nobody, if the lease expired) must find it due
                await self._make_due(claim.chat_id)
                return Step("lost")
        if status == Status.BUSY:
            return Step("busy")  # another worker holds it; the watchdog brings it back in time
        return Step("item", _decode_item(result))

    async def note(
        self,
        claim: Claim,
        item: QueueItem,
        outcome: Literal["transient", "failed", "set_aside"],
        *,
        replied: Sequence[str] = (),
        model_requests: int = 0,
        retry_in: float = 0.0,
    ) -> None:
        """Record how an attempt at ``item`` ended, the model requests it made and how long to wait
        before the next (kept on the item: any worker honours it), and mark ``replied`` (only while
        holding the lease)."""
        keys = self._keys.chat(claim.chat_id)
        kind = {"transient": "t", "failed": "x", "set_aside": "s"}[outcome]
        args: list[str | int | float] = [claim.token, item.id, kind, item.started, max(model_requests, 0)]
        args += [max(int(retry_in * 1000), 0), *self._replied_args(replied)]
        with redis_errors(f"chat {claim.chat_id}: cannot record an attempt"):
            await self._note(keys=[keys.lease, keys.attempts, keys.replied], args=args)

    async def given_up(self, claim: Claim, item: QueueItem, stage: int) -> None:
        """Record how far giving ``item`` up got (1: dead-lettered, 2: the customer told), so that a
        redelivery neither repeats the dead letter nor the customer's final message."""
        keys = self._keys.chat(claim.chat_id)
        with redis_errors(f"chat {claim.chat_id}: cannot record a give-up"):
            await self._given_up(keys=[keys.lease, keys.attempts], args=[claim.token, item.id, stage])

    async def defer(self, claim: Claim, seconds: float) -> None:
        """Give the chat back, due again in ``seconds`` (its inbox head asked to wait that long)."""
        with redis_errors(f"chat {claim.chat_id}: cannot defer"):
            await self._drop_lease(keys=[self._keys.chat(claim.chat_id).lease], args=[claim.token])
            await self._defer(keys=[self._keys.ready], args=[str(claim.chat_id), max(int(seconds * 1000), 0)])

    def _replied_args(self, replied: Sequence[str]) -> list[str | int | float]:
        return [self._replied_ttl, time.time(), *replied] if replied else []

    async def wait_for_work(self, seconds: float) -> None:
        """Block until something was enqueued (or ``seconds`` pass). Needs its own connection."""
        with redis_errors("cannot wait for work"):
            await self._redis.blpop([self._keys.wake], timeout=seconds)

    async def renew(self, claim: Claim) -> bool:
        """Extend the lease and the watchdog; False if the lease was lost."""
        keys = self._keys.chat(claim.chat_id)
        with redis_errors(f"chat {claim.chat_id}: cannot renew"):
            if not await self._renew(keys=[keys.lease], args=[claim.token, self.lease_ms]):
                return False
        try:
            with redis_errors(f"chat {claim.chat_id}: cannot push the watchdog"):
                claim.watchdog = int(
                    await self._push_watchdog(keys=[self._keys.ready], args=[str(claim.chat_id), self.lease_ms])
                )
        except StoreUnavailableError:
            # On a cluster the ready set may live on a master that is down while the chat's is up: the
            # lease is kept all the same. If the watchdog fires meanwhile, whoever claims the chat finds
            # the lease busy and leaves it; the lease, not the watchdog, decides who serves the chat.
            pass
        return True

    async def hand_back(self, claim: Claim) -> None:
        """Give the chat up with work possibly left (stopping, or the lease may have lapsed): drop the
        lease if still ours, and make the chat due so another worker takes it at once."""
        with redis_errors(f"chat {claim.chat_id}: cannot hand back"):
            await self._drop_lease(keys=[self._keys.chat(claim.chat_id).lease], args=[claim.token])
            await self._make_due(claim.chat_id)

    async def stats(self) -> tuple[int, float]:
        """(chats due now, age in seconds of the longest-waiting due chat)."""
        with redis_errors("cannot read queue stats"):
            count, age_ms = await self._stats(keys=[self._keys.ready])
        return int(count), int(age_ms) / 1000


def _decode_item(result: list[object]) -> QueueItem:
    member = cast(bytes, result[1])
    started, transient, age_ms = (int(cast(int, value)) for value in result[2:5])
    try:
        data = json.loads(member)
        item_id, payload, enqueued = str(data["id"]), str(data["p"]), int(data.get("t", 0))
    except (ValueError, KeyError, TypeError):
        item_id, payload, enqueued = member.decode(errors="replace"), "", 0
    return QueueItem(
        id=item_id,
        payload=payload,
        enqueued_ms=enqueued,
        member=member,
        order=int(float(cast(bytes, result[5]))),
        started=started,
        transient_failures=transient,
        failures=int(cast(int, result[6])),
        failing_for=age_ms / 1000,
        model_requests=int(cast(int, result[7])),
        retry_in=int(cast(int, result[8])) / 1000,
        given_up=int(cast(int, result[9])),
    )
