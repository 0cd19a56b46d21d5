"""Handoff to a human operator, end to end in one process: the real aiogram Bot and Dispatcher against
the stub Bot API (forum topics, copyMessage), the real AsyncOpenAI against the stub model (which can
answer with a tool call), the in-process store and a real redis-server."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.factory import build_bot, build_desk, build_engine
from bot.provider_health import ProviderWatch
from bot.telegram.texts import TEXTS, Texts
from prompts.support_chat import HANDOFF_TOOL
from services.backends.memory import InMemoryBackend, InMemoryHandoffStore
from services.core.errors import StoreUnavailableError
from tests.conftest import RedisServer
from tests.e2e.harness import RunningBot, make_settings, start_bot
from tests.e2e.waiting import eventually
from tests.stubs.openai_server import StubOpenAI, customer_texts, tool_reply
from tests.stubs.telegram_server import StubTelegram

CHAT = 31337
GROUP = -1001234567890
SEED = (
    "Hello, my order 7718 arrived and the monitor stand is cracked.",
    "The box was intact, no damage on the outside.",
    "I took a photo of the crack this morning.",
)
DECISION = (
    "We will send a replacement stand for order 7718 free of charge; the courier collects the cracked one Friday."
)

_REPLY = re.compile(r"<support_reply>\n(.*?)\n</support_reply>", re.S)


def operator_aware_summary(body: dict[str, Any]) -> str:
    """A stub summarizer that keeps what the customer said as facts and what support said as
    decisions (the real model's job; the stub's default keeps only the customer's side)."""
    content = body["messages"][-1]["content"]
    previous = re.search(r"<previous_summary>\n(.*?)\n</previous_summary>", content, re.S)
    old = json.loads(previous.group(1)) if previous else {}
    return json.dumps(
        {
            "topic": "damaged delivery",
            "key_facts": [*old.get("key_facts", []), *(t[:100] for t in customer_texts(body))],
            "actions_taken": old.get("actions_taken", []),
            "decisions": [*old.get("decisions", []), *(r[:200] for r in _REPLY.findall(content) if "operator" in r)],
            "pending_questions": [],
            "next_step": "continue",
        }
    )


def prompt_of(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] or "" for m in request["messages"])


@pytest.fixture(params=["memory", "redis"])
async def running(request: pytest.FixtureRequest, telegram: StubTelegram, stub_llm: StubOpenAI) -> Any:
    redis_url = None
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        client = Redis.from_url(server.url)
        await client.flushdb()
        await client.aclose()
        redis_url = server.url
    stub_llm.summary_reply = operator_aware_summary
    settings = make_settings(telegram.base_url, stub_llm.base_url, redis_url, bot={"operator_chat_id": GROUP})
    bot = await start_bot(settings)
    yield bot
    await bot.stop()


async def seed(telegram: StubTelegram) -> None:
    for n, line in enumerate(SEED, start=1):
        telegram.send_text(CHAT, line)
        await telegram.wait_messages(CHAT, n)


async def wait_topic(telegram: StubTelegram) -> int:
    await telegram.wait_for(lambda: bool(telegram.topics))
    (thread,) = telegram.topics
    return thread


async def test_operator_command_ticket_relay_note_close_and_memory(
    running: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    await seed(telegram)
    telegram.send_text(CHAT, "/operator")
    thread = await wait_topic(telegram)
    assert telegram.topics[thread]["chat_id"] == GROUP and str(CHAT) in telegram.topics[thread]["name"]
    await telegram.wait_for(lambda: TEXTS["en"]["handoff_started"] in telegram.texts_to(CHAT))
    ticket = "\n".join(c.params["text"] for c in telegram.in_topic(thread, "sendMessage"))
    for fact in ("7718", "monitor stand is cracked", "box was intact", "photo of the crack"):
        assert fact in ticket, (fact, ticket)
    assert "/operator" in ticket and "Customer's language: en" in ticket
    model_calls = len(stub_llm.chat_requests)

    # the customer's photo and text reach the topic, in order
    photo = telegram.push(telegram.photo_update(CHAT, caption="the crack"))
    telegram.send_text(CHAT, "Can I get a replacement?")
    await telegram.wait_for(lambda: len(telegram.in_topic(thread, "copyMessage")) == 2)
    copies = telegram.in_topic(thread, "copyMessage")
    assert [int(c.params["from_chat_id"]) for c in copies] == [CHAT, CHAT]
    assert int(copies[0].params["message_id"]) == photo["message"]["message_id"]
    assert int(copies[0].params["message_id"]) < int(copies[1].params["message_id"])

    # the operator's answer reaches the customer; the note does not
    answer = telegram.push(telegram.operator_update(GROUP, thread, DECISION))
    await telegram.wait_for(lambda: len(telegram.of("copyMessage", CHAT)) == 1)
    copied = telegram.of("copyMessage", CHAT)[0].params
    assert int(copied["from_chat_id"]) == GROUP and int(copied["message_id"]) == answer["message"]["message_id"]
    telegram.push(telegram.operator_update(GROUP, thread, "/note customer was polite, VIP"))
    telegram.push(telegram.operator_update(GROUP, thread, "/close"))
    await telegram.wait_for(lambda: TEXTS["en"]["handoff_closed"] in telegram.texts_to(CHAT))
    assert len(telegram.of("copyMessage", CHAT)) == 1, "a /note never reaches the customer"
    assert not any("VIP" in t for t in telegram.texts_to(CHAT))
    assert telegram.topics[thread]["closed"]
    assert len(stub_llm.chat_requests) == model_calls, "the model is not called during the handoff"

    # the assistant is back and knows what the operator decided
    telegram.send_text(CHAT, "When does the courier come?")
    await telegram.wait_for(lambda: len(stub_llm.chat_requests) == model_calls + 1)
    (summary,) = [
        m["content"]
        for m in stub_llm.chat_requests[-1]["messages"]
        if m["content"].startswith("<conversation_summary>")
    ]
    assert "replacement stand" in summary and "Friday" in summary and "7718" in summary, summary
    assert not any("VIP" in prompt_of(r) for r in stub_llm.requests), "internal notes never reach the model"


async def test_the_model_hands_over_and_a_second_handoff_reopens_the_topic(
    running: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    telegram.send_text(CHAT, "Order 7718: the stand is cracked.")
    await telegram.wait_messages(CHAT, 1)
    stub_llm.chat_replies.append(tool_reply(HANDOFF_TOOL, reason="refund decision needed"))
    telegram.send_text(CHAT, "I want my money back now.", language="ru")
    thread = await wait_topic(telegram)
    await telegram.wait_for(lambda: TEXTS["ru"]["handoff_started"] in telegram.texts_to(CHAT))
    assert stub_llm.chat_requests[-2]["tools"][0]["function"]["name"] == HANDOFF_TOOL
    ticket = "\n".join(c.params["text"] for c in telegram.in_topic(thread, "sendMessage"))
    assert "refund decision needed" in ticket and "I want my money back now." in ticket and ": ru" in ticket
    assert not any("handed over" in t for t in telegram.texts_to(CHAT)), "the marker is not a reply"
    telegram.push(telegram.operator_update(GROUP, thread, "/close"))
    await telegram.wait_for(lambda: telegram.topics[thread]["closed"])
    telegram.send_text(CHAT, "/operator")
    await telegram.wait_for(lambda: not telegram.topics[thread]["closed"])
    assert len(telegram.topics) == 1, "one topic per customer chat, reopened"


async def test_forget_and_new_end_a_handoff(running: RunningBot, telegram: StubTelegram) -> None:
    await seed(telegram)
    telegram.send_text(CHAT, "/operator")
    thread = await wait_topic(telegram)
    await telegram.wait_for(lambda: TEXTS["en"]["handoff_started"] in telegram.texts_to(CHAT))
    telegram.send_text(CHAT, "/forget")
    await telegram.wait_for(lambda: TEXTS["en"]["forget_done"] in telegram.texts_to(CHAT))
    lines = [c.params["text"] for c in telegram.in_topic(thread, "sendMessage")]
    assert lines[-1] == TEXTS["en"]["op_ended_forget"] and telegram.topics[thread]["closed"]
    assert (await running.backend.handoffs.get(CHAT)).state == "none"
    assert await running.backend.handoffs.chat_of_topic(GROUP, thread) is None
    session = await running.store.load(CHAT)
    assert session.messages == () and session.summary is None
    # operators writing into the old topic reach nobody
    telegram.push(telegram.operator_update(GROUP, thread, "hello?"))
    telegram.send_text(CHAT, "new question")
    await telegram.wait_messages(CHAT, len(telegram.texts_to(CHAT)) + 1)
    assert telegram.of("copyMessage", CHAT) == []

    telegram.send_text(CHAT, "/operator")
    await telegram.wait_for(lambda: len(telegram.topics) == 2)
    (second,) = set(telegram.topics) - {thread}
    telegram.send_text(CHAT, "/new")
    await telegram.wait_for(lambda: TEXTS["en"]["new_done"] in telegram.texts_to(CHAT))
    assert telegram.in_topic(second, "sendMessage")[-1].params["text"] == TEXTS["en"]["op_ended_new"]
    assert (await running.backend.handoffs.get(CHAT)).state == "closed"


async def test_handoff_off_without_operator_chat(telegram: StubTelegram, stub_llm: StubOpenAI) -> None:
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, None))
    try:
        telegram.send_text(CHAT, "/operator")
        await telegram.wait_messages(CHAT, 1)
        assert telegram.texts_to(CHAT) == [TEXTS["en"]["operator_off"]]
        telegram.send_text(CHAT, "hello")
        await telegram.wait_messages(CHAT, 2)
        assert "tools" not in stub_llm.chat_requests[-1]
        assert HANDOFF_TOOL not in prompt_of(stub_llm.chat_requests[-1])
        # a group the bot is in is no operator group: nothing is relayed, the group is an ordinary chat
        telegram.push(telegram.operator_update(GROUP, 5, "hi @support_test_bot"))
        await telegram.wait_messages(GROUP, 1)
        assert telegram.of("copyMessage") == [] and telegram.of("createForumTopic") == []
    finally:
        await bot.stop()


@pytest.mark.parametrize("resume", [False, True])
async def test_no_operator_reply_in_time(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis, resume: bool
) -> None:
    settings = make_settings(
        telegram.base_url,
        stub_llm.base_url,
        redis_server.url,
        bot={"operator_chat_id": GROUP, "handoff_reply_timeout_seconds": 0.5, "handoff_resume_on_timeout": resume},
    )
    bot = await start_bot(settings)
    try:
        telegram.send_text(CHAT, "Order 7718: the stand is cracked.")
        await telegram.wait_messages(CHAT, 1)
        telegram.send_text(CHAT, "/operator")
        thread = await wait_topic(telegram)
        expected = TEXTS["en"]["handoff_slow_resumed" if resume else "handoff_slow"]
        await telegram.wait_for(lambda: expected in telegram.texts_to(CHAT))
        lines = [c.params["text"] for c in telegram.in_topic(thread, "sendMessage")]
        assert lines[-1] == TEXTS["en"]["op_overdue_resumed" if resume else "op_overdue"].format(minutes=0)
        handoffs = bot.backend.handoffs

        async def handled() -> bool:  # the flag, the closing and the deadline come after the notices
            record = await handoffs.get(CHAT)
            state = (record.state, record.flagged) == (("closed", False) if resume else ("open", True))
            return state and await handoffs.due() == []

        await eventually(handled, within=10, what="the overdue handoff flagged or closed, its deadline gone")
        calls = len(stub_llm.chat_requests)
        telegram.send_text(CHAT, "Still there?")
        if resume:  # the assistant answers again
            await telegram.wait_for(lambda: len(stub_llm.chat_requests) == calls + 1)
        else:  # still with the operators, told once
            await telegram.wait_for(lambda: len(telegram.in_topic(thread, "copyMessage")) == 1)
            assert telegram.texts_to(CHAT).count(expected) == 1 and len(stub_llm.chat_requests) == calls
    finally:
        await bot.stop()


class StartFailsOnce(InMemoryHandoffStore):
    """A handoff store whose first ``start`` fails as an unreachable Redis would (a worker dying there)."""

    failed = False

    async def start(self, chat_id: int, **kwargs: Any) -> bool:
        if not self.failed:
            self.failed = True
            raise StoreUnavailableError("Redis unreachable")
        return await super().start(chat_id, **kwargs)


async def test_a_start_redone_after_a_failure_posts_the_ticket_once(
    telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    settings = make_settings(telegram.base_url, stub_llm.base_url, None, bot={"operator_chat_id": GROUP})
    backend = InMemoryBackend()
    backend.handoffs = StartFailsOnce()
    chat = build_engine(settings, backend, provider=ProviderWatch())
    desk = build_desk(chat, settings.bot, backend)
    bot = build_bot(settings.bot)
    try:
        start = {
            "user": None,
            "reason": "asked",
            "trigger": "command",
            "say": Texts("en"),
            "item_id": "u7",
            "fence": None,
            "private": True,
        }
        with pytest.raises(StoreUnavailableError):
            await desk.start(bot, CHAT, **start)  # type: ignore[arg-type]
        await desk.start(bot, CHAT, **start)  # type: ignore[arg-type]
        (thread,) = telegram.topics
        tickets = [c for c in telegram.in_topic(thread, "sendMessage") if c.params["text"].startswith("Ticket for")]
        assert len(tickets) == 1 and len(telegram.of("createForumTopic")) == 1
        assert (await backend.handoffs.get(CHAT)).open
        assert telegram.texts_to(CHAT) == [TEXTS["en"]["handoff_started"]]
    finally:
        await chat.close()
        await bot.session.close()


async def test_rate_limits_apply_to_the_customer_not_to_operators(telegram: StubTelegram, stub_llm: StubOpenAI) -> None:
    settings = make_settings(
        telegram.base_url, stub_llm.base_url, None, bot={"operator_chat_id": GROUP, "rate_limit_per_minute": 2}
    )
    bot = await start_bot(settings)
    try:
        telegram.send_text(CHAT, "/operator")
        thread = await wait_topic(telegram)
        await telegram.wait_for(lambda: TEXTS["en"]["handoff_started"] in telegram.texts_to(CHAT))
        for n in range(3):
            telegram.send_text(CHAT, f"customer {n}")
        await telegram.wait_for(
            lambda: any(t.startswith("You are sending messages too fast") for t in telegram.texts_to(CHAT))
        )
        for n in range(4):
            telegram.push(telegram.operator_update(GROUP, thread, f"operator {n}"))
        await telegram.wait_for(lambda: len(telegram.of("copyMessage", CHAT)) == 4)
        assert len(telegram.in_topic(thread, "copyMessage")) == 2
    finally:
        await bot.stop()


async def _open_handoff(telegram: StubTelegram, chat: int = CHAT) -> int:
    telegram.send_text(chat, "/operator")
    await telegram.wait_for(lambda: TEXTS["en"]["handoff_started"] in telegram.texts_to(chat))
    return max(telegram.topics)


async def test_a_handoff_resumed_on_timeout_is_not_counted_open_again(
    telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    settings = make_settings(
        telegram.base_url, stub_llm.base_url, None,
        bot={"operator_chat_id": GROUP, "handoff_reply_timeout_seconds": 0.3, "handoff_resume_on_timeout": True},
    )  # fmt: skip
    bot = await start_bot(settings)
    try:
        await _open_handoff(telegram)
        await telegram.wait_for(lambda: TEXTS["en"]["handoff_slow_resumed"] in telegram.texts_to(CHAT))
        handoffs = bot.backend.handoffs
        assert isinstance(handoffs, InMemoryHandoffStore)
        await telegram.wait_for(lambda: CHAT not in handoffs._deadlines)  # the watcher is done with the chat
        assert (await handoffs.get(CHAT)).state == "closed"
        assert await handoffs.open_count() == 0
    finally:
        await bot.stop()


async def test_a_note_or_close_in_a_media_caption_is_not_copied_to_the_customer(
    telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, None, bot={"operator_chat_id": GROUP}))
    try:
        thread = await _open_handoff(telegram)
        photo = [{"file_id": "AgAD-photo", "file_unique_id": "p1", "width": 640, "height": 480}]
        caption = {"photo": photo, "caption": "/note internal: refund fraud?"}
        telegram.push(telegram.operator_update(GROUP, thread, None, extra=caption))
        telegram.push(telegram.operator_update(GROUP, thread, "visible answer"))
        handoffs = bot.backend.handoffs

        async def relayed() -> list[str]:
            return [e.text for e in (await handoffs.get(CHAT, transcript=True)).transcript if e.who == "operator"]

        deadline = time.monotonic() + 10
        while "visible answer" not in await relayed():
            assert time.monotonic() < deadline, "the operator's answer was never relayed"
            await asyncio.sleep(0.02)
        assert len(telegram.of("copyMessage", CHAT)) == 1, "the /note photo was copied to the customer"
        notes = [e.text for e in (await handoffs.get(CHAT, transcript=True)).transcript if e.who == "note"]
        assert notes == ["internal: refund fraud?"]
    finally:
        await bot.stop()


async def test_operator_commands_are_this_bots_only_and_ignore_case(
    telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    """``/close@another_bot`` is neither relayed nor obeyed; ``/CLOSE@Support_Test_Bot`` closes."""
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, None, bot={"operator_chat_id": GROUP}))
    try:
        thread = await _open_handoff(telegram)
        telegram.push(telegram.operator_update(GROUP, thread, "/close@another_bot"))
        telegram.push(telegram.operator_update(GROUP, thread, "/note@another_bot not ours"))
        telegram.push(telegram.operator_update(GROUP, thread, "/CLOSE@Support_Test_Bot"))
        handoffs = bot.backend.handoffs
        deadline = time.monotonic() + 10
        while (await handoffs.get(CHAT)).open:
            assert time.monotonic() < deadline, "/CLOSE@Support_Test_Bot did not close the handoff"
            await asyncio.sleep(0.02)
        record = await handoffs.get(CHAT, transcript=True)
        assert record.closed_by.startswith("operator "), record.closed_by
        assert not telegram.of("copyMessage", CHAT), "a command for another bot was copied to the customer"
        assert all(entry.who != "note" for entry in record.transcript)
    finally:
        await bot.stop()


async def test_an_operator_posting_as_an_anonymous_admin_is_relayed(
    telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, None, bot={"operator_chat_id": GROUP}))
    try:
        thread = await _open_handoff(telegram)
        update = telegram.operator_update(GROUP, thread, "hello, I am Olga from support")
        update["message"]["from"] = {
            "id": 1087968824, "is_bot": True, "first_name": "Group", "username": "GroupAnonymousBot",
        }  # fmt: skip
        update["message"]["sender_chat"] = {"id": GROUP, "type": "supergroup", "title": "Support"}
        telegram.push(update)
        await telegram.wait_for(lambda: len(telegram.of("copyMessage", CHAT)) == 1, within=30)
    finally:
        await bot.stop()


class DeletedTopicTelegram(StubTelegram):
    """Operators deleted a topic: whatever is sent into it is refused (400)."""

    deleted: set[int]

    def _gone(self, params: dict[str, Any]) -> Any:
        from aiohttp import web

        thread = params.get("message_thread_id")
        if thread is not None and int(thread) in getattr(self, "deleted", set()):
            return web.json_response(
                {"ok": False, "error_code": 400, "description": "Bad Request: message thread not found"}, status=400
            )
        return None

    async def _m_sendMessage(self, params: dict[str, Any]) -> Any:
        return self._gone(params) or await super()._m_sendMessage(params)

    async def _m_copyMessage(self, params: dict[str, Any]) -> Any:
        return self._gone(params) or await super()._m_copyMessage(params)


async def test_forget_works_after_the_operators_deleted_the_topic(stub_llm: StubOpenAI) -> None:
    telegram = DeletedTopicTelegram()
    await telegram.start()
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, None, bot={"operator_chat_id": GROUP}))
    try:
        thread = await _open_handoff(telegram)
        telegram.deleted = {thread}
        telegram.topics.pop(thread)
        for _ in range(2):
            before = len(telegram.texts_to(CHAT))
            telegram.send_text(CHAT, "/forget")
            await telegram.wait_messages(CHAT, before + 1)
        assert TEXTS["en"]["forget_done"] in telegram.texts_to(CHAT), "/forget never completes"
        assert (await bot.backend.handoffs.get(CHAT)).state == "none"
    finally:
        await bot.stop()
        await telegram.stop()


async def test_a_customer_message_to_a_deleted_topic_ends_the_handoff(stub_llm: StubOpenAI) -> None:
    telegram = DeletedTopicTelegram()
    await telegram.start()
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, None, bot={"operator_chat_id": GROUP}))
    try:
        thread = await _open_handoff(telegram)
        telegram.deleted = {thread}
        telegram.topics.pop(thread)
        telegram.send_text(CHAT, "is anyone there?")
        await telegram.wait_for(lambda: TEXTS["en"]["handoff_lost"] in telegram.texts_to(CHAT))
        assert (await bot.backend.handoffs.get(CHAT)).state == "closed"
    finally:
        await bot.stop()
        await telegram.stop()


async def test_one_failing_overdue_notice_does_not_stop_the_deadline_watcher(
    telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    from collections import deque

    settings = make_settings(
        telegram.base_url, stub_llm.base_url, None,
        bot={"operator_chat_id": GROUP, "handoff_reply_timeout_seconds": 0.5},
    )  # fmt: skip
    bot = await start_bot(settings)
    try:
        await _open_handoff(telegram)
        # the overdue notice fails as Telegram answers for a blocked or deleted target
        telegram.faults["sendMessage"] = deque([{"error_code": 403, "description": "Forbidden: bot was blocked"}])
        await telegram.wait_for(lambda: not telegram.faults["sendMessage"])
        other = CHAT + 1
        await _open_handoff(telegram, other)
        await telegram.wait_for(lambda: TEXTS["en"]["handoff_slow"] in telegram.texts_to(other), within=30)
    finally:
        await bot.stop()
