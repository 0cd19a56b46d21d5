"""Anything that is not text (stickers, photos, voice, documents...): a polite answer, no state touched."""

from __future__ import annotations

from aiogram import Router
from aiogram.types import Message

from bot.settings import BotSettings
from bot.telegram.texts import language_of, text


async def on_other(message: Message, settings: BotSettings) -> None:
    await message.answer(text(language_of(message.from_user, settings), "text_only"), parse_mode=None)


def make_router() -> Router:
    router = Router(name="unsupported")
    router.message.register(on_other)
    return router
