"""The handoff desk tells the conversation log what happened (docs/quality.md): a handoff's end whose
recording failed is recorded when the update is redone, a group's handoff is a group conversation, and
the customer's messages relayed to the operators keep the conversation going."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from aiogram.types import Chat, Message

from bot.settings import BotSettings
from bot.telegram.desk import HandoffDesk
from bot.telegram.feedback import Feedback
from bot.telegram.texts import TEXTS, Texts
from services.backends.memory import InMemoryBackend
from services.core.errors import StoreUnavailableError
from services.memory.handoff_memory import HandoffMemory
from tests.unit.bot.telegram.test_handoff_desk import CHAT, GROUP, TOPIC, FakeBot, opened, operator_message


def desk_with_feedback(backend: InMemoryBackend, *, gap: int = 86400) -> HandoffDesk:
    settings = BotSettings(_env_file=None, operator_chat_id=GROUP)  # type: ignore[call-arg]
    memory = HandoffMemory(store=backend.store, summarizer=None)  # type: ignore[arg-type]
    feedback = Feedback(backend.conversations, after=3600, gap=gap, default_language="en")
    return HandoffDesk(store=backend.handoffs, memory=memory, settings=settings, feedback=feedback)


async def test_a_close_whose_end_was_not_recorded_records_it_when_redone() -> None:
    backend = InMemoryBackend()
    log = backend.conversations
    await log.customer_message(CHAT, private=True, language="en", gap_seconds=86400)
    await log.answered(CHAT, ask_after_seconds=3600)
    await opened(backend)
    await log.handoff_opened(CHAT, private=True)
    real, calls = log.handoff_ended, {"n": 0}

    async def fails_once(chat_id: int, *, ask: bool) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreUnavailableError("redis blinked")
        await real(chat_id, ask=ask)

    log.handoff_ended = fails_once  # type: ignore[method-assign]
    desk, bot, close = desk_with_feedback(backend), FakeBot(), operator_message("/close")
    with pytest.raises(StoreUnavailableError):
        await desk.close_from_operator(bot, close, "u11", None)  # type: ignore[arg-type]
    assert not (await backend.handoffs.get(CHAT)).open, "the handoff store ended it"
    await desk.close_from_operator(bot, close, "u11", None)  # type: ignore[arg-type]  # redelivered
    assert (CHAT, TEXTS["en"]["handoff_closed"]) in bot.sent
    assert await log.begin_ask(CHAT) is not None, "the end is recorded: the question is due"


async def test_operator_in_a_group_starts_a_group_conversation() -> None:
    backend = InMemoryBackend()
    desk, bot = desk_with_feedback(backend), FakeBot()
    group_chat = -100777
    start: dict[str, Any] = dict(user=None, reason="r", trigger="command", say=Texts("en"), item_id="u7", fence=None)
    await desk.start(bot, group_chat, **start, private=False)  # type: ignore[arg-type]
    (record,) = await backend.conversations.conversations(0)
    assert record.chat_id == group_chat and not record.private


async def test_relayed_customer_messages_keep_the_conversation_going() -> None:
    backend = InMemoryBackend()
    log = backend.conversations
    gap = 0.2
    await log.customer_message(CHAT, private=True, language="en", gap_seconds=gap)
    await opened(backend)
    await log.handoff_opened(CHAT, private=True)
    desk, bot = desk_with_feedback(backend), FakeBot()
    for n in range(3):
        await asyncio.sleep(gap * 0.6)
        customer = Message(message_id=100 + n, date=datetime.datetime.now(), chat=Chat(id=CHAT, type="private"),
                           text=f"and another thing {n}")  # fmt: skip
        await desk.from_customer(bot, customer, f"u{20 + n}", None)  # type: ignore[arg-type]
    assert bot.sent.count((GROUP, "copy")) == 3 and TOPIC
    assert not (await log.customer_message(CHAT, private=True, language="en", gap_seconds=gap)).new
    (record,) = await log.conversations(0)
    assert record.messages == 5
