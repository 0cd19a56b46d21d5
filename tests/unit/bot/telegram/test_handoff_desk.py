"""The handoff desk against a fake Bot: races between an operator's message and the customer's
/forget (in-process mode), and the retries of a start or a close after a failure in the middle."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from typing import Any

import pytest
from aiogram.types import Chat, Message, User

from bot.settings import BotSettings
from bot.telegram.desk import HandoffDesk
from bot.telegram.texts import TEXTS, Texts
from prompts import default_registry
from services.backends.memory import InMemoryBackend
from services.core.errors import LLMUnavailableError, StoreUnavailableError, TransientError
from services.core.tokens import TokenCounter
from services.memory.handoff_memory import HandoffMemory
from services.memory.summarizer import Summarizer

CHAT, GROUP, TOPIC = 31337, -1001234567890, 500


class FakeBot:
    id = 42

    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    async def copy_message(self, chat_id: int, *args: Any, **kwargs: Any) -> None:
        self.sent.append((chat_id, "copy"))

    async def send_message(self, chat_id: int, body: str, **kwargs: Any) -> None:
        self.sent.append((chat_id, body))

    async def close_forum_topic(self, *args: Any) -> None:
        pass

    async def create_forum_topic(self, chat_id: int, name: str) -> Any:
        class Topic:
            message_thread_id = TOPIC

        return Topic()


def desk_for(backend: InMemoryBackend) -> HandoffDesk:
    settings = BotSettings(_env_file=None, operator_chat_id=GROUP)  # type: ignore[call-arg]
    memory = HandoffMemory(store=backend.store, summarizer=None)  # type: ignore[arg-type]
    return HandoffDesk(store=backend.handoffs, memory=memory, settings=settings)


async def opened(backend: InMemoryBackend) -> None:
    h = backend.handoffs
    await h.set_topic(CHAT, GROUP, TOPIC)
    await h.bind_topic(GROUP, TOPIC, CHAT)
    await h.start(CHAT, reason="r", trigger="command", language="en", item_id="u1")


def operator_message(text: str) -> Message:
    return Message(
        message_id=77, date=datetime.datetime.now(), chat=Chat(id=GROUP, type="supergroup", is_forum=True),
        from_user=User(id=9001, is_bot=False, first_name="Olga"), text=text, message_thread_id=TOPIC,
        is_topic_message=True,
    )  # fmt: skip


async def test_an_operator_message_racing_forget_is_neither_copied_nor_kept() -> None:
    backend = InMemoryBackend()
    await opened(backend)
    desk = desk_for(backend)
    bot = FakeBot()
    async with desk.lock(CHAT):  # the customer's /forget is under way (as on_forget runs it)
        relay = asyncio.create_task(desk.from_operator(bot, operator_message("your card ends 4242"), "u10", None))  # type: ignore[arg-type]
        for _ in range(20):
            await asyncio.sleep(0)  # the operator's update gets as far as it can
        record = await desk.open_record(CHAT)
        assert record is not None
        await backend.forget_chat(CHAT)
    await relay
    assert (CHAT, "copy") not in bot.sent, "an operator's message reached the customer after /forget"
    left = await backend.handoffs.get(CHAT, transcript=True)
    assert left.state == "none" and left.transcript == (), f"/forget left the operator's message behind: {left}"


async def test_the_store_records_nothing_for_a_handoff_forgotten_meanwhile() -> None:
    backend = InMemoryBackend()
    await opened(backend)
    h = backend.handoffs
    await backend.forget_chat(CHAT)
    from services.core.handoff_records import TranscriptEntry

    await h.begin_relay(CHAT, "u10")
    recorded = await h.record(CHAT, "u10", TranscriptEntry("operator", "late"))
    assert not recorded.new
    assert await h.get(CHAT, transcript=True) == type(await h.get(CHAT))()
    assert await h.relay_state(CHAT, "u10") == "new"


async def test_a_start_redone_after_a_crash_past_open_sets_the_deadline() -> None:
    backend = InMemoryBackend()
    h = backend.handoffs
    real_track = h.track
    calls = {"n": 0}

    async def track_fails_once(chat_id: int, **kw: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreUnavailableError("the worker dies here")
        await real_track(chat_id, **kw)

    h.track = track_fails_once  # type: ignore[method-assign]
    desk = desk_for(backend)
    bot = FakeBot()
    start: dict[str, Any] = dict(user=None, reason="r", trigger="command", say=Texts("en"), item_id="u7", fence=None,
                             private=True)  # fmt: skip
    with contextlib.suppress(StoreUnavailableError):
        await desk.start(bot, CHAT, **start)  # type: ignore[arg-type]
    await desk.start(bot, CHAT, **start)  # type: ignore[arg-type]  # the redelivery
    to_customer = [b for c, b in bot.sent if c == CHAT]
    assert to_customer == [TEXTS["en"]["handoff_started"]], to_customer
    assert await h.open_count() == 1 and CHAT in h._deadlines, "no reply deadline: the handoff never times out"
    await desk.start(bot, CHAT, **{**start, "item_id": "u8"})  # type: ignore[arg-type]  # another /operator
    assert [b for c, b in bot.sent if c == CHAT][-1] == TEXTS["en"]["handoff_already"]


class FlakyGroupBot(FakeBot):
    fail = True

    async def send_message(self, chat_id: int, body: str, **kwargs: Any) -> None:
        if chat_id == GROUP and self.fail:
            self.fail = False
            raise TransientError("network blip")  # the worker retries the update
        await super().send_message(chat_id, body, **kwargs)


@pytest.mark.parametrize("retry", ["u11", "u12"], ids=["redelivered", "sent-again-by-the-operator"])
async def test_a_close_retried_after_a_blip_still_tells_the_customer_and_the_topic(retry: str) -> None:
    backend = InMemoryBackend()
    await opened(backend)
    desk = desk_for(backend)
    bot = FlakyGroupBot()
    close = operator_message("/close")
    with contextlib.suppress(TransientError):
        await desk.close_from_operator(bot, close, "u11", None)  # type: ignore[arg-type]
    await desk.close_from_operator(bot, close, retry, None)  # type: ignore[arg-type]  # the retry
    assert (CHAT, TEXTS["en"]["handoff_closed"]) in bot.sent, "the customer is never told the handoff ended"
    assert (GROUP, TEXTS["en"]["op_closed"]) in bot.sent, "the topic is never told"
    await desk.close_from_operator(bot, close, "u13", None)  # type: ignore[arg-type]  # a later /close
    assert bot.sent[-1] == (GROUP, TEXTS["en"]["op_not_open"])
    assert bot.sent.count((CHAT, TEXTS["en"]["handoff_closed"])) == 1


class FailingModel:
    async def summarize(self, *args: Any, **kwargs: Any) -> Any:
        raise LLMUnavailableError("HTTP 503: the model is down", status=503)


async def test_a_close_while_summaries_fail_ends_the_handoff_with_the_transcript_kept_by_identifiers() -> None:
    from services.core.handoff_records import TranscriptEntry

    backend = InMemoryBackend()
    await opened(backend)
    await backend.handoffs.record(CHAT, "u2", TranscriptEntry("operator", "a replacement ships Friday, order 7718"))
    settings = BotSettings(_env_file=None, operator_chat_id=GROUP)  # type: ignore[call-arg]
    prompt = default_registry().get("summary")
    summarizer = Summarizer(
        llm=FailingModel(), counter=TokenCounter.for_encoding("o200k_base"), prompt=prompt, max_tokens=300
    )
    memory = HandoffMemory(store=backend.store, summarizer=summarizer)
    desk = HandoffDesk(store=backend.handoffs, memory=memory, settings=settings)
    bot = FakeBot()
    await desk.close_from_operator(bot, operator_message("/close"), "u11", None)  # type: ignore[arg-type]
    assert not (await backend.handoffs.get(CHAT)).open, "the customer is not left in relay mode"
    assert (CHAT, TEXTS["en"]["handoff_closed"]) in bot.sent
    summary = (await backend.store.load(CHAT)).summary
    assert summary is not None and "7718" in " ".join(summary.key_facts)


@pytest.mark.parametrize("resume", [False, True])
async def test_an_overdue_handoff_redone_after_a_blip_sends_each_notice_once(resume: bool) -> None:
    backend = InMemoryBackend()
    await opened(backend)
    await backend.handoffs.track(CHAT, open=True, reply_within=0)
    settings = BotSettings(_env_file=None, operator_chat_id=GROUP, handoff_resume_on_timeout=resume)  # type: ignore[call-arg]
    memory = HandoffMemory(store=backend.store, summarizer=None)  # type: ignore[arg-type]
    desk = HandoffDesk(store=backend.handoffs, memory=memory, settings=settings)
    bot = FlakyGroupBot()
    with pytest.raises(TransientError):
        await desk.overdue(bot, CHAT, None)  # type: ignore[arg-type]
    assert await backend.handoffs.due() == [CHAT], "the deadline stays until the notices went out"
    await desk.overdue(bot, CHAT, None)  # type: ignore[arg-type]  # the watcher's next round
    await desk.overdue(bot, CHAT, None)  # type: ignore[arg-type]  # and one more: nothing new
    key, line = ("handoff_slow_resumed", "op_overdue_resumed") if resume else ("handoff_slow", "op_overdue")
    to_customer = [b for c, b in bot.sent if c == CHAT]
    to_topic = [b for c, b in bot.sent if c == GROUP]
    assert to_customer == [TEXTS["en"][key]]
    assert len(to_topic) == 1 and to_topic[0].startswith(TEXTS["en"][line].split("{")[0][:20])
    assert await backend.handoffs.due() == []
    assert await backend.handoffs.open_count() == (0 if resume else 1)
    record = await backend.handoffs.get(CHAT)
    assert record.state == ("closed" if resume else "open") and record.flagged is not resume


class ReopeningBot(FakeBot):
    def __init__(self) -> None:
        super().__init__()
        self.reopened: list[tuple[int, int]] = []

    async def reopen_forum_topic(self, chat_id: int, thread: int) -> None:
        self.reopened.append((chat_id, thread))


async def test_a_topic_of_the_previous_operator_group_is_never_reopened_in_the_new_one() -> None:
    backend = InMemoryBackend()
    h = backend.handoffs
    old_group, old_topic = GROUP - 1, 600
    await h.set_topic(CHAT, old_group, old_topic)  # a handoff from before OPERATOR_CHAT_ID changed
    await h.bind_topic(old_group, old_topic, CHAT)
    desk = desk_for(backend)  # now GROUP
    bot = ReopeningBot()
    start: dict[str, Any] = dict(user=None, reason="r", trigger="command", say=Texts("en"), item_id="u7", fence=None,
                             private=True)  # fmt: skip
    await desk.start(bot, CHAT, **start)  # type: ignore[arg-type]
    assert bot.reopened == [], "another customer's topic with that id may exist in the new group"
    record = await h.get(CHAT)
    assert (record.topic_group, record.topic_id) == (GROUP, TOPIC)
    assert await h.chat_of_topic(GROUP, TOPIC) == CHAT
    assert await h.chat_of_topic(GROUP, old_topic) is None
