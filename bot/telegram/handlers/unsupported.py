"""Anything that is not text (stickers, photos, voice, documents...): a polite answer, no state touched."""

from __future__ import annotations

from aiogram import Router
from aiogram.types import Message

from bot.telegram.texts import Texts


async def on_other(message: Message, say: Texts) -> None:
    await message.answer(say("text_only"))


def make_router() -> Router:
    router = Router(name="unsupported")
    router.message.register(on_other)
    return router
