"""The bot's answer is recorded for the quality figures as soon as it was sent (docs/quality.md): a
``finish`` that fails afterwards (a compaction's model call) loses neither the first answer's time nor
the question's schedule."""

from __future__ import annotations

from typing import Any

import pytest

from bot.settings import BotSettings
from bot.telegram.desk import HandoffDesk
from bot.telegram.feedback import Feedback
from bot.telegram.handlers.chat import TurnPlace, deliver_turn
from bot.telegram.texts import Texts
from services.backends.memory import InMemoryBackend
from services.backends.memory.quality import InMemoryConversationLog
from services.core.errors import LLMUnavailableError
from services.core.turns import PendingTurn, TurnResult

CHAT = 4242


class FakeBot:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_message(self, chat_id: int, text: str, **kwargs: Any) -> None:
        self.sent.append(text)

    async def send_chat_action(self, *args: Any, **kwargs: Any) -> None:
        pass


class FinishFails:
    async def finish(self, turn: PendingTurn, *, fence: Any = None) -> TurnResult:
        raise LLMUnavailableError("HTTP 503: compacting failed", status=503)


async def test_a_finish_failing_after_the_reply_keeps_the_answer_and_the_schedule() -> None:
    backend = InMemoryBackend()
    log = backend.conversations
    settings = BotSettings(_env_file=None, drafts_enabled=False)  # type: ignore[call-arg]
    feedback = Feedback(log, after=3600, gap=86400, default_language="en")
    desk = HandoffDesk(store=backend.handoffs, memory=None, settings=settings, feedback=feedback)
    await log.customer_message(CHAT, private=True, language="en", gap_seconds=86400)
    bot = FakeBot()

    async def produce(*_: Any) -> PendingTurn:
        return PendingTurn(CHAT, "u1", TurnResult(reply="Refunds take 14 days."), deliver=True, after="answered")

    where = TurnPlace(CHAT, None, 1, private=True)
    with pytest.raises(LLMUnavailableError):
        await deliver_turn(bot, FinishFails(), settings, Texts("en"), desk, where, "u1", produce, None, None)  # type: ignore[arg-type]
    assert bot.sent == ["Refunds take 14 days."]
    (record,) = await log.conversations(0)
    assert record.first_answer_ms, "the answer went out: its time is recorded"
    assert isinstance(log, InMemoryConversationLog) and log._due.get(CHAT), "the question is scheduled"
