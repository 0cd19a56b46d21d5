"""Feedback, Telegram side: a question Telegram refused is never retried nor counted as asked, and a
handoff's end that cannot be recorded raises (its update is retried) instead of silencing the chat."""

from __future__ import annotations

import asyncio

import pytest
from aiogram.exceptions import TelegramForbiddenError
from aiogram.methods import SendMessage

from bot.metrics import FEEDBACK_ASKED
from bot.telegram.feedback import Feedback
from services.backends.memory.quality import InMemoryConversationLog
from services.core.errors import StoreUnavailableError
from services.core.quality import Figures

CHAT = 4242


class BlockedBot:
    async def send_message(self, chat_id: int, text: str, **kwargs: object) -> None:
        raise TelegramForbiddenError(SendMessage(chat_id=chat_id, text=text), "Forbidden: bot was blocked by the user")


async def test_a_question_telegram_refused_is_not_counted_as_asked() -> None:
    log = InMemoryConversationLog()
    feedback = Feedback(log, after=1, gap=3600, default_language="en")
    await log.customer_message(CHAT, private=True, language="en", gap_seconds=3600)
    await log.answered(CHAT, ask_after_seconds=0.01)
    await asyncio.sleep(0.03)
    before = FEEDBACK_ASKED._value.get()
    await feedback.ask(BlockedBot(), CHAT, None)  # type: ignore[arg-type]
    assert Figures.of(await log.conversations(0)).asked == 0 and FEEDBACK_ASKED._value.get() == before
    assert await log.begin_ask(CHAT) is None, "never tried again"


class Down(InMemoryConversationLog):
    async def handoff_ended(self, chat_id: int, *, ask: bool) -> None:
        raise StoreUnavailableError("redis is down")


async def test_a_handoff_end_not_recorded_raises_for_a_retry() -> None:
    feedback = Feedback(Down(), after=1, gap=3600, default_language="en")
    with pytest.raises(StoreUnavailableError):
        await feedback.handoff_ended(CHAT, "operator")
