"""/start, /help and /new."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from aiogram import Router
from aiogram.filters import Command, CommandStart
from aiogram.types import Message

from bot.settings import BotSettings
from bot.telegram.texts import language_of, text
from services.engine.chat import ChatService
from services.fence import Fence

Erasers = Sequence[Callable[[int], Awaitable[None]]]


async def on_start(message: Message, settings: BotSettings) -> None:
    await message.answer(text(language_of(message.from_user, settings), "start"), parse_mode=None)


async def on_help(message: Message, settings: BotSettings) -> None:
    await message.answer(text(language_of(message.from_user, settings), "help"), parse_mode=None)


async def on_new(message: Message, chat: ChatService, settings: BotSettings, fence: Fence | None = None) -> None:
    await chat.reset(message.chat.id, fence=fence)
    if fence is not None:
        fence.ensure_valid()
    await message.answer(text(language_of(message.from_user, settings), "new_done"), parse_mode=None)


async def on_forget(
    message: Message, chat: ChatService, settings: BotSettings, erasers: Erasers, fence: Fence | None = None
) -> None:
    """Delete every record of the chat's conversation: session, rate-limit window, dead letters."""
    await chat.forget(message.chat.id, fence=fence)
    for erase in erasers:
        await erase(message.chat.id)
    if fence is not None:
        fence.ensure_valid()
    await message.answer(text(language_of(message.from_user, settings), "forget_done"), parse_mode=None)


def make_router() -> Router:
    router = Router(name="commands")
    router.message.register(on_start, CommandStart())
    router.message.register(on_help, Command("help"))
    router.message.register(on_new, Command("new"))
    router.message.register(on_forget, Command("forget"))
    return router
