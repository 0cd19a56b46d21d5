"""Any message no other handler reads (stickers, videos, locations, contacts, polls...): a polite
answer (``text_only``, the reply a kind of media turned off gets too), no state touched. Text goes to
the chat handler; photos, voice notes, audio, video notes and documents to the media handler."""

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
