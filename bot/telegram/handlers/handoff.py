"""Handoff to a human operator: the operator group's messages, ``/operator``, and the customer's
messages while a person handles the chat (copied to the operators instead of going to the model)."""

from __future__ import annotations

from typing import Any

from aiogram import Bot, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import Message, Update

from bot.telegram.desk import HandoffDesk
from bot.telegram.middlewares.ratelimit import RateLimitMiddleware
from bot.telegram.texts import Texts
from services.core.fence import Fence
from services.ports.queue import item_id_of


async def in_operator_group(message: Message, desk: HandoffDesk) -> bool:
    return desk.is_operator_group(message.chat.id)


async def in_handoff(message: Message, desk: HandoffDesk) -> bool | dict[str, Any]:
    """The chat's open handoff, as handler data (``handoff``)."""
    record = await desk.open_record(message.chat.id)
    return {"handoff": record} if record is not None else False


async def to_another_bot(message: Message, bot: Bot) -> bool:
    """A command (in a text or a media caption) addressed to another bot: ``/close@other_bot``."""
    words = (message.text or message.caption or "").split(maxsplit=1)
    if not words or not words[0].startswith("/"):
        return False
    _, _, addressee = words[0].partition("@")
    return bool(addressee) and addressee.lower() != ((await bot.me()).username or "").lower()


async def on_operator_close(
    message: Message, bot: Bot, desk: HandoffDesk, event_update: Update, fence: Fence | None = None
) -> None:
    await desk.close_from_operator(bot, message, item_id_of(event_update.update_id), fence)


async def on_operator_note(
    message: Message,
    bot: Bot,
    desk: HandoffDesk,
    command: CommandObject,
    event_update: Update,
    fence: Fence | None = None,
) -> None:
    await desk.note_from_operator(bot, message, command.args or "", item_id_of(event_update.update_id), fence)


async def on_another_bots_command(message: Message) -> None:
    """Not for this bot: neither relayed nor answered."""


async def on_operator_group(
    message: Message, bot: Bot, desk: HandoffDesk, event_update: Update, fence: Fence | None = None
) -> None:
    """Everything else in the operator group ends here: it never reaches the model."""
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
        private=message.chat.type == "private",
    )


async def on_customer(
    message: Message,
    bot: Bot,
    desk: HandoffDesk,
    handoff: Any,
    event_update: Update,
    fence: Fence | None = None,
) -> None:
    """Copied to the operators' topic (the customer's rate limit still applies: the relay router's
    middleware; the operators' messages have none)."""
    await desk.from_customer(bot, message, item_id_of(event_update.update_id), fence)


def make_router() -> Router:
    """The operator group (its commands in a topic, text or caption, then everything else) and
    /operator (before the other commands)."""
    router = Router(name="handoff")
    router.message.register(on_operator_close, in_operator_group, Command("close", ignore_case=True))
    router.message.register(on_operator_note, in_operator_group, Command("note", ignore_case=True))
    router.message.register(on_another_bots_command, in_operator_group, to_another_bot)
    router.message.register(on_operator_group, in_operator_group)
    router.message.register(on_operator, Command("operator"))
    return router


def make_relay_router() -> Router:
    """The customer's messages during a handoff (after /start, /help, /new, /forget, before the model)."""
    router = Router(name="handoff_relay")
    router.message.middleware(RateLimitMiddleware())  # after in_handoff matched
    router.message.register(on_customer, in_handoff)
    return router
