"""Durable intake: updates reach Redis before Telegram is told they arrived.

Webhook: the request is answered 200 only after the update is queued (503 if Redis is down, so
Telegram retries). Polling: one worker at a time holds the poller lease, queues what getUpdates returns
and only then moves the offset on (stored in Redis, so the next leader continues from it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramConflictError
from aiohttp import web
from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.errors import StoreError
from services.metrics import REDELIVERIES
from services.queue import ChatWorkQueue

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_CHAT_CARRIERS = ("message", "edited_message", "channel_post", "edited_channel_post", "business_message")


def chat_of(update: dict[str, Any]) -> int | None:
    for key in _CHAT_CARRIERS:
        carrier = update.get(key)
        if isinstance(carrier, dict) and isinstance(carrier.get("chat"), dict):
            chat_id = carrier["chat"].get("id")
            return int(chat_id) if isinstance(chat_id, int) else None
    return None


async def queue_update(queue: ChatWorkQueue, update: dict[str, Any]) -> bool:
    """Queue one raw update under its chat; False if it carries no chat (nothing to do)."""
    chat_id = chat_of(update)
    update_id = update.get("update_id")
    if chat_id is None or not isinstance(update_id, int):
        return False
    if not await queue.enqueue(chat_id, f"u{update_id}", json.dumps(update, ensure_ascii=False), order=update_id):
        REDELIVERIES.inc()
    return True


def webhook_handler(queue: ChatWorkQueue, secret: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        if not secrets.compare_digest(request.headers.get(SECRET_HEADER, ""), secret):
            return web.Response(status=401, text="Unauthorized")
        try:
            update = await request.json()
        except (ValueError, UnicodeDecodeError):
            return web.Response(status=400, text="Bad Request")
        if not isinstance(update, dict):
            return web.Response(status=400, text="Bad Request")
        try:
            await queue_update(queue, update)
        except StoreError as exc:
            log.warning("update not queued, Telegram will retry: %s", exc)
            return web.Response(status=503, text="Service Unavailable")
        return web.Response(status=200)

    return handle


# KEYS: leader. ARGV: token, lease_ms → 1 if this token leads (lease renewed or taken)
_LEAD = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]); return 1 end
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]); return 1 end
return 0
"""
# KEYS: leader, offset. ARGV: token, offset
_SET_OFFSET = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""
# KEYS: leader. ARGV: token
_RESIGN = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Poller:
    """getUpdates by exactly one worker at a time (a leader lease in Redis)."""

    def __init__(
        self,
        *,
        redis: Redis,
        bot: Bot,
        queue: ChatWorkQueue,
        key_prefix: str,
        identity: str,
        lease_ms: int,
        poll_timeout: int,
        allowed_updates: list[str],
    ) -> None:
        self._redis = redis
        self._bot = bot
        self._queue = queue
        # per bot: another token on the same Redis must not inherit this bot's offset
        self._leader_key = f"{key_prefix}:poller:{bot.id}"
        self._offset_key = f"{key_prefix}:poller:{bot.id}:offset"
        self._token = identity
        self._lease_ms = lease_ms
        self._poll_timeout = poll_timeout
        self._allowed = allowed_updates
        self._lead = redis.register_script(_LEAD)
        self._set_offset = redis.register_script(_SET_OFFSET)
        self._resign = redis.register_script(_RESIGN)
        self._stopping = asyncio.Event()
        self.leading = False
        self.conflicts = 0

    def stop(self) -> None:
        self._stopping.set()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    leading = bool(await self._lead(keys=[self._leader_key], args=[self._token, self._lease_ms]))
                except RedisError as exc:
                    log.warning("poller: Redis unreachable (%s)", type(exc).__name__)
                    leading = False
                if leading != self.leading:
                    log.info("poller: %s leadership", "took" if leading else "lost")
                    self.leading = leading
                    if leading:
                        with contextlib.suppress(TelegramAPIError):
                            await self._bot.delete_webhook(drop_pending_updates=False)
                if not leading:
                    await self._pause(self._lease_ms / 3000)
                    continue
                await self._poll_once()
        finally:
            if self.leading:
                with contextlib.suppress(RedisError):
                    await self._resign(keys=[self._leader_key], args=[self._token])

    async def _poll_once(self) -> None:
        try:
            raw_offset = await self._redis.get(self._offset_key)
            offset = int(raw_offset) if raw_offset else None
            updates = await self._bot.get_updates(
                offset=offset,
                timeout=self._poll_timeout,
                allowed_updates=self._allowed,
                request_timeout=self._poll_timeout + 10,
            )
        except TelegramConflictError:
            # another getUpdates is still open (e.g. a dead leader's long poll): wait it out
            self.conflicts += 1
            await self._pause(1.0)
            return
        except (TelegramAPIError, RedisError, OSError) as exc:
            log.warning("poller: getUpdates failed (%s); retrying", type(exc).__name__)
            await self._pause(1.0)
            return
        if not updates:
            return
        try:
            for update in updates:
                await queue_update(self._queue, update.model_dump(mode="json", by_alias=True, exclude_none=True))
            await self._set_offset(
                keys=[self._leader_key, self._offset_key], args=[self._token, updates[-1].update_id + 1]
            )
        except (StoreError, RedisError) as exc:
            # not acknowledged: Telegram sends them again on the next getUpdates
            log.warning("poller: could not queue updates (%s)", type(exc).__name__)
            await self._pause(1.0)
