"""Handoff to a human operator: the operator group's messages, ``/operator``, and the customer's
messages while a person handles the chat (copied to the operators instead of going to the model)."""

from __future__ import annotations

from typing import Any

from aiogram import Bot, Router
from aiogram.filters import Command
from aiogram.types import Message, Update

from bot.telegram.handoff import HandoffDesk
from bot.telegram.texts import Texts
from services.fence import Fence
from services.metrics import RATE_LIMITED
from services.ports.queue import item_id_of
from services.ports.ratelimit import RateLimiter


async def in_operator_group(message: Message, desk: HandoffDesk) -> bool:
    return desk.is_operator_group(message.chat.id)


async def in_handoff(message: Message, desk: HandoffDesk) -> bool | dict[str, Any]:
    """The chat's open handoff, as handler data (``handoff``)."""
    record = await desk.open_record(message.chat.id)
    return {"handoff": record} if record is not None else False


async def on_operator_group(
    message: Message, bot: Bot, desk: HandoffDesk, event_update: Update, fence: Fence | None = None
) -> None:
    """Everything in the operator group ends here: it never reaches the model."""
    await desk.from_operator(bot, message, item_id_of(event_update.update_id), fence)


async def on_operator(
    message: Message, bot: Bot, desk: HandoffDesk, say: Texts, event_update: Update, fence: Fence | None = None
) -> None:
    if not desk.enabled:
        await message.answer(say("operator_off"))
        return
    await desk.start(
        bot,
        message.chat.id,
        user=message.from_user,
        reason=desk.ops("op_reason_command"),
        trigger="command",
        say=say,
        item_id=item_id_of(event_update.update_id),
        fence=fence,
    )


async def on_customer(
    message: Message,
    bot: Bot,
    desk: HandoffDesk,
    handoff: Any,
    limiter: RateLimiter,
    say: Texts,
    event_update: Update,
    fence: Fence | None = None,
) -> None:
    """The customer's rate limit still applies (the operators' messages have none)."""
    item_id = item_id_of(event_update.update_id)
    decision = await limiter.hit(message.chat.id, key=item_id)
    if not decision.allowed:
        RATE_LIMITED.inc()
        if decision.notify and (fence is None or fence.remaining() > 0):
            await message.answer(say("rate_limited", seconds=max(1, round(decision.retry_after))))
        return
    await desk.from_customer(bot, message, item_id, fence)


def make_router() -> Router:
    """The operator group and /operator (before the other commands)."""
    router = Router(name="handoff")
    router.message.register(on_operator_group, in_operator_group)
    router.message.register(on_operator, Command("operator"))
    return router


def make_relay_router() -> Router:
    """The customer's messages during a handoff (after /start, /help, /new, /forget, before the model)."""
    router = Router(name="handoff_relay")
    router.message.register(on_customer, in_handoff)
    return router
