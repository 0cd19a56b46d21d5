"""/start, /help, /new and /forget (the last two also end an open handoff to an operator); /chatid
tells a chat its id (how an operator finds the value of OPERATOR_CHAT_ID)."""

from __future__ import annotations

import logging

from aiogram import Bot, Router
from aiogram.filters import Command, CommandStart
from aiogram.types import Message, Update

from bot.telegram.desk import HandoffDesk
from bot.telegram.texts import Texts
from services.core.fence import Fence
from services.engine.chat import ChatService
from services.ports.backend import Backend
from services.ports.queue import item_id_of

log = logging.getLogger(__name__)


async def on_start(message: Message, say: Texts) -> None:
    await message.answer(say("start"))


async def on_help(message: Message, say: Texts) -> None:
    await message.answer(say("help"))


async def on_chat_id(message: Message, say: Texts) -> None:
    """The chat's id, and whether this group can be the operators' desk (a supergroup with Topics).
    Not a secret: every member of a group can read it with any bot; OPERATOR_CHAT_ID's own group is
    the operators' router's, so it never gets here."""
    chat = message.chat
    if chat.type == "private":
        key = "chat_id_private"
    else:
        key = "chat_id_forum" if chat.type == "supergroup" and chat.is_forum else "chat_id_group"
    log.info("/chatid in chat=%s (%s%s)", chat.id, chat.type, ", topics on" if chat.is_forum else "")
    await message.answer(say(key, chat_id=chat.id))


async def on_new(
    message: Message,
    bot: Bot,
    chat: ChatService,
    desk: HandoffDesk,
    say: Texts,
    event_update: Update,
    fence: Fence | None = None,
) -> None:
    if desk.enabled:
        async with desk.lock(message.chat.id):
            await desk.end_or_resume(
                bot, message.chat.id, by="new", item_id=item_id_of(event_update.update_id), fence=fence
            )
            await chat.reset(message.chat.id, fence=fence)
    else:
        await chat.reset(message.chat.id, fence=fence)
    if desk.feedback is not None:
        await desk.feedback.ended(message.chat.id)
    if fence is not None:
        fence.ensure_valid()
    await message.answer(say("new_done"))


async def on_forget(
    message: Message, bot: Bot, backend: Backend, desk: HandoffDesk, say: Texts, fence: Fence | None = None
) -> None:
    """Delete every record of the chat's conversation (the backend knows them all); an open handoff
    ends with it (its topic is told afterwards, best effort; what was copied into the operator group
    stays there)."""
    async with desk.lock(message.chat.id):  # no operator's message is relayed while it runs, or after
        handoff = await desk.open_record(message.chat.id)
        await backend.forget_chat(message.chat.id, fence=fence)
        if handoff is not None:
            await desk.forgotten(bot, message.chat.id, handoff, fence)
    if fence is not None:
        fence.ensure_valid()
    await message.answer(say("forget_done"))


def make_router() -> Router:
    router = Router(name="commands")
    router.message.register(on_start, CommandStart())
    router.message.register(on_help, Command("help"))
    router.message.register(on_chat_id, Command("chatid"))
    router.message.register(on_new, Command("new"))
    router.message.register(on_forget, Command("forget"))
    return router
