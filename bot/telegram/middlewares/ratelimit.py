"""The customer's per-chat rate limit, one inner middleware on the routers whose handlers count: the
model's text router and the handoff relay (commands, unsupported messages and the operators' group
pass without a hit). A refused message is dropped, with one notice per window while the fence (if any)
still holds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware
from aiogram.types import Message, TelegramObject, Update

from bot.metrics import RATE_LIMITED
from bot.telegram.texts import Texts
from services.core.fence import Fence
from services.ports.queue import item_id_of
from services.ports.ratelimit import RateLimiter


class RateLimitMiddleware(BaseMiddleware):
    """Counts each message once per update (the key is the item id, so a redelivery is no second hit),
    an album once (the key is its media group)."""

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if not isinstance(event, Message):
            return await handler(event, data)
        limiter: RateLimiter = data["limiter"]
        update: Update = data["event_update"]
        # an album is one message to the customer (and one turn): its photos share one hit
        key = f"album:{event.media_group_id}" if event.media_group_id else item_id_of(update.update_id)
        decision = await limiter.hit(event.chat.id, key=key)
        if decision.allowed:
            return await handler(event, data)
        RATE_LIMITED.inc()
        fence: Fence | None = data.get("fence")
        if decision.notify and (fence is None or fence.remaining() > 0):
            say: Texts = data["say"]
            await event.answer(say("rate_limited", seconds=max(1, round(decision.retry_after))))
        return None
