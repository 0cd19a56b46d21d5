"""Operators turn unanswered questions into learned FAQ entries, through the real aiogram dispatcher
and a stub Bot API server: /faq add, list, edit and remove in the operators' group, a reply to a
message of the daily digest, /faq in a handoff topic (the operator's answer with the customer's
question before it); the digest posted once a day by concurrent posters; and the queued-mode route
that brings these messages, outside any topic, to the group's own inbox."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiogram import Bot, Dispatcher
from redis.asyncio import Redis

from bot.factory import build_bot, build_dispatcher
from bot.provider_health import ProviderWatch
from bot.queueing.intake import operator_route
from bot.serving.gaps_digest import GapsDigest, digest_day
from bot.settings import BotSettings
from bot.telegram.texts import Texts
from services.backends.memory import InMemoryBackend
from services.backends.redis.faq import RedisLearnedFaq
from services.core.handoff_records import TranscriptEntry
from services.core.knowledge import DigestPost
from tests.conftest import TEST_KEYS, RedisServer
from tests.stubs.telegram_server import BOT_USER, StubTelegram

GROUP, TOPIC, CUSTOMER = -1001234567890, 500, 31337
TOKEN = f"{BOT_USER['id']}:" + "A" * 35
OPS = Texts("en")
NOON = 1_764_936_000.0  # 2025-12-05 12:00 UTC


class NoChat:
    """The chat service: never reached by the operators' group."""

    summarizer = None

    async def close(self) -> None:
        return None


class Desk:
    def __init__(self, telegram: StubTelegram, backend: InMemoryBackend, bot: Bot, dispatcher: Dispatcher) -> None:
        self.telegram, self.backend, self.bot, self.dispatcher = telegram, backend, bot, dispatcher

    async def feed(self, update: dict[str, Any]) -> None:
        await self.dispatcher.feed_raw_update(self.bot, update)

    async def say(self, text: str, *, thread: int | None = None, reply_to: dict[str, Any] | None = None) -> None:
        extra = {"reply_to_message": reply_to} if reply_to is not None else None
        await self.feed(self.telegram.operator_update(GROUP, thread, text, extra=extra))

    def last(self) -> str:
        return str(self.telegram.of("sendMessage", GROUP)[-1].params["text"])


@pytest.fixture
async def desk(telegram: StubTelegram) -> AsyncIterator[Desk]:
    settings = BotSettings(_env_file=None, bot_token=TOKEN, telegram_api_url=telegram.base_url, operator_chat_id=GROUP)  # type: ignore[call-arg]
    backend = InMemoryBackend()
    bot = build_bot(settings)
    dispatcher = build_dispatcher(NoChat(), settings, backend=backend, provider=ProviderWatch())  # type: ignore[arg-type]
    yield Desk(telegram, backend, bot, dispatcher)
    await bot.session.close()


def bot_message(message_id: int, text: str) -> dict[str, Any]:
    chat = {"id": GROUP, "type": "supergroup", "title": "Ops", "is_forum": True}
    return {"message_id": message_id, "date": 0, "chat": chat, "from": BOT_USER, "text": text}


async def test_faq_add_list_edit_and_remove_in_the_operators_group(desk: Desk) -> None:
    await desk.say("/faq add Можно ли оплатить картой Мир? | Да, картой Мир можно.")
    assert desk.last().startswith(OPS("faq_saved", id="1").split(":")[0])
    entries = await desk.backend.faq.entries()
    assert [(e.id, e.questions, e.answer, e.author) for e in entries] == [
        ("1", ("Можно ли оплатить картой Мир?",), "Да, картой Мир можно.", "Olga")
    ]
    redelivered = desk.telegram.operator_update(GROUP, None, "/faq add Можно ли? | Да, можно.")
    await desk.feed(redelivered)
    await desk.feed(redelivered)
    assert len(await desk.backend.faq.entries()) == 2, "a redelivered update makes no second entry"
    await desk.say("/faq remove 2")
    await desk.say("/faq list")
    assert desk.last() == "#1 Можно ли оплатить картой Мир? → Да, картой Мир можно."
    await desk.say("/faq edit #1 Можно ли оплатить картой Мир? | Да, и по СБП.")
    assert desk.last() == OPS("faq_edited", id="1", version=2)
    await desk.say("/faq remove #1")
    assert desk.last() == OPS("faq_removed", id="1")
    await desk.say("/faq remove 1")
    assert desk.last() == OPS("faq_missing", id="1")
    await desk.say("/faq list")
    assert desk.last() == OPS("faq_none")
    assert [e.answer for e in await desk.backend.faq.history("1")] == ["Да, картой Мир можно.", "Да, и по СБП."]


@pytest.mark.parametrize(
    "text", ["/faq add no bar here", "/faq add | only an answer", "/faq frobnicate", "/faq add " + "|" * 100_000]
)
async def test_a_malformed_faq_command_gets_the_usage_and_stores_nothing(desk: Desk, text: str) -> None:
    await desk.say(text)
    assert desk.last() == OPS("faq_usage")
    assert await desk.backend.faq.entries() == []


async def test_a_reply_to_a_digest_group_becomes_an_entry_with_its_questions(desk: Desk) -> None:
    gaps = desk.backend.gaps
    for chat, question in enumerate(["Do you ship to Mars?", "do you ship to mars", "Do you ship to Mars?"]):
        await gaps.record(chat, question)
    await gaps.record(9, "how much is the gift wrapping")
    digest = GapsDigest(
        bot=desk.bot, gaps=gaps, faq=desk.backend.faq, group=GROUP, hour=9, groups=5, ops=OPS, clock=lambda: NOON
    )
    assert await digest.look() == 2
    assert await digest.look() == 0, "once a day"
    posted = desk.telegram.of("sendMessage", GROUP)
    assert len(posted) == 3 and posted[1].params["text"].startswith("❓ asked 3×: do you ship to mars")
    first = await desk.bot.send_message(GROUP, "(a message id past the digest)")  # the stub's ids only grow
    group_id = first.message_id - 2  # the first group's message
    assert await desk.backend.faq.post(group_id) is not None
    await desk.say("Not yet: only to Earth and the Moon.", reply_to=bot_message(group_id, "❓ …"))
    [entry] = await desk.backend.faq.entries()
    assert entry.questions == ("do you ship to mars?", "do you ship to mars") and entry.answer.startswith("Not yet")
    assert desk.last().startswith("Saved as FAQ #1")
    await desk.say("an ordinary reply", reply_to=bot_message(first.message_id, "(a message id past the digest)"))
    assert len(await desk.backend.faq.entries()) == 1, "a reply to any other message of the bot is no answer"


async def open_handoff(backend: InMemoryBackend, *entries: TranscriptEntry) -> None:
    h = backend.handoffs
    await h.set_topic(CUSTOMER, GROUP, TOPIC)
    await h.bind_topic(GROUP, TOPIC, CUSTOMER)
    await h.start(CUSTOMER, reason="r", trigger="command", language="ru", item_id="u1")
    for n, entry in enumerate(entries):
        await h.begin_relay(CUSTOMER, f"e{n}")
        await h.record(CUSTOMER, f"e{n}", entry)


async def test_faq_in_a_handoff_topic_saves_the_operators_answer_with_the_customers_question(desk: Desk) -> None:
    await open_handoff(
        desk.backend,
        TranscriptEntry("customer", "Здравствуйте."),
        TranscriptEntry("operator", "Добрый день!"),
        TranscriptEntry("customer", "Можно ли вернуть подарочную карту?"),
        TranscriptEntry("customer", "Её не активировали."),
        TranscriptEntry("note", "checked the policy"),
        TranscriptEntry("operator", "Да, неактивированную карту можно вернуть в течение 14 дней."),
    )
    await desk.say("/faq", thread=TOPIC)
    [entry] = await desk.backend.faq.entries()
    assert entry.questions == ("Можно ли вернуть подарочную карту? Её не активировали.",)
    assert entry.answer == "Да, неактивированную карту можно вернуть в течение 14 дней."
    assert desk.telegram.in_topic(TOPIC)[-1].params["text"].startswith("Saved as FAQ #1")
    own = desk.telegram.operator_update(GROUP, TOPIC, "Добрый день!")["message"]
    await desk.say("/faq", thread=TOPIC, reply_to=own)
    assert len(await desk.backend.faq.entries()) == 1, "a greeting answering a greeting is no FAQ"
    assert desk.telegram.in_topic(TOPIC)[-1].params["text"] == OPS("faq_no_answer")


async def test_faq_outside_a_handoff_topic_without_arguments_gets_the_usage(desk: Desk) -> None:
    await desk.say("/faq")
    assert desk.last() == OPS("faq_usage")


async def test_queued_mode_routes_faq_and_digest_replies_to_the_groups_own_inbox() -> None:
    backend = InMemoryBackend()
    route = operator_route(GROUP, backend.handoffs, backend.faq)
    stub = StubTelegram()
    await backend.faq.remember_post(77, DigestPost(("q",), 1))
    faq_command = stub.operator_update(GROUP, None, "/faq@support_test_bot list")
    reply = stub.operator_update(GROUP, None, "the answer", extra={"reply_to_message": bot_message(77, "❓")})
    other_reply = stub.operator_update(GROUP, None, "hm", extra={"reply_to_message": bot_message(78, "hi")})
    chatter = stub.operator_update(GROUP, None, "lunch?")
    in_unknown_topic = stub.operator_update(GROUP, 999, "/faq list")
    assert await route(GROUP, faq_command) == GROUP
    assert await route(GROUP, reply) == GROUP
    assert await route(GROUP, other_reply) is None
    assert await route(GROUP, chatter) is None
    assert await route(GROUP, in_unknown_topic) is None
    assert await route(CUSTOMER, stub.message_update(CUSTOMER, "/faq list")) == CUSTOMER


def test_the_digest_is_due_from_its_hour_on_each_utc_day() -> None:
    assert digest_day(NOON, 9) == "2025-12-05"
    assert digest_day(NOON, 13) is None
    assert digest_day(NOON, 0) == "2025-12-05"


async def test_two_concurrent_posters_post_the_days_digest_once(redis_server: RedisServer) -> None:
    client = Redis.from_url(redis_server.url)
    await client.flushdb()
    sent: list[str] = []

    class Posting:
        async def send_message(self, chat_id: int, text: str, **kwargs: Any) -> Any:
            sent.append(text)
            await asyncio.sleep(0)

            class Sent:
                message_id = len(sent)

            return Sent()

    backend = InMemoryBackend()
    for chat in range(3):
        await backend.gaps.record(chat, "where is my parcel tracking number")
    try:
        posters = [
            GapsDigest(
                bot=Posting(),  # type: ignore[arg-type]
                gaps=backend.gaps,
                faq=RedisLearnedFaq(redis=client, keys=TEST_KEYS),
                group=GROUP,
                hour=9,
                groups=5,
                ops=OPS,
                clock=lambda: NOON,
            )
            for _ in range(2)
        ]
        posted = await asyncio.gather(*(p.look() for p in posters), *(p.look() for p in posters))
    finally:
        await client.aclose()
    assert sorted(posted) == [0, 0, 0, 1] and len(sent) == 2, sent


async def test_a_digest_that_fails_before_posting_gives_the_day_back(redis_server: RedisServer) -> None:
    client = Redis.from_url(redis_server.url)
    await client.flushdb()
    sent: list[str] = []

    class Refusing:
        fail = True

        async def send_message(self, chat_id: int, text: str, **kwargs: Any) -> Any:
            if self.fail:
                self.fail = False
                raise ConnectionError("the Bot API is unreachable")
            sent.append(text)

            class Sent:
                message_id = len(sent)

            return Sent()

    backend = InMemoryBackend()
    await backend.gaps.record(1, "where is my parcel tracking number")
    faq = RedisLearnedFaq(redis=client, keys=TEST_KEYS)
    digest = GapsDigest(
        bot=Refusing(),  # type: ignore[arg-type]
        gaps=backend.gaps, faq=faq, group=GROUP, hour=9, groups=5, ops=OPS, clock=lambda: NOON,
    )  # fmt: skip
    try:
        with pytest.raises(ConnectionError):
            await digest.look()
        assert await digest.look() == 1, "the next look posts the day's digest"
        assert await digest.look() == 0
        assert not await faq.claim_digest("2025-12-05")
    finally:
        await client.aclose()
    assert len(sent) == 2
