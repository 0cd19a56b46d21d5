"""End to end: real aiogram Bot/Dispatcher ↔ stub Bot API, real AsyncOpenAI ↔ stub OpenAI, real redis-server."""

from __future__ import annotations

from collections import deque

import pytest
from redis.asyncio import Redis

from bot.telegram.texts import TEXTS
from services.backends.redis.keys import KeySpace
from tests.conftest import RedisServer
from tests.e2e.harness import TOKEN, make_settings, start_bot
from tests.e2e.waiting import eventually
from tests.helpers import customer_line
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

CHAT = 555


def prompt_text(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"])


async def snapshot(redis: Redis) -> dict[bytes, bytes | None]:
    """Every session key (the rate-limit window is not part of the session, nor are the conversation
    records: a message that arrived took the chat's feedback question off the schedule, answered or not)."""
    other = (b":rate", b":rate_notice", b":quality", b"quality}:due", b"quality}:conversations")
    keys = [key for key in sorted(await redis.keys("*")) if not key.endswith(other)]
    return {key: await redis.dump(key) for key in keys}


async def test_long_conversation_compacts_keeps_order_number_and_new_resets(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    settings = make_settings(
        telegram.base_url, stub_llm.base_url, redis_server.url, chat_input_token_budget=1100, summary_max_tokens=300
    )
    bot = await start_bot(settings)
    try:
        telegram.send_text(CHAT, "Hello, my order 7718 arrived with a broken screen.")
        await telegram.wait_messages(CHAT, 1)
        for n in range(12):
            telegram.send_text(CHAT, customer_line(n))
            await telegram.wait_messages(CHAT, n + 2)
        assert stub_llm.summary_requests, "the small budget must have forced a compaction"
        session = await bot.store.load(CHAT)
        assert session.summary is not None
        assert all("7718" not in m.content for m in session.messages), "first turn folded out of the verbatim part"
        late_prompts = [prompt_text(r) for r in stub_llm.chat_requests[-3:]]
        assert all("7718" in p for p in late_prompts)
        telegram.send_text(CHAT, "/new")
        await telegram.wait_messages(CHAT, 14)
        assert telegram.texts_to(CHAT)[-1] == TEXTS["en"]["new_done"]
        telegram.send_text(CHAT, "Something else entirely")
        await telegram.wait_messages(CHAT, 15)
        assert "7718" not in prompt_text(stub_llm.chat_requests[-1])
        assert len(stub_llm.chat_requests[-1]["messages"]) == 2
    finally:
        await bot.stop()


async def test_restart_keeps_the_session(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    settings = make_settings(telegram.base_url, stub_llm.base_url, redis_server.url)
    first = await start_bot(settings)
    telegram.send_text(CHAT, "My ticket is T-4410")
    await telegram.wait_messages(CHAT, 1)
    await first.stop()
    second = await start_bot(settings)
    try:
        telegram.send_text(CHAT, "Any news?")
        await telegram.wait_messages(CHAT, 2)
        assert "T-4410" in prompt_text(stub_llm.chat_requests[-1])
    finally:
        await second.stop()


async def reply_marked(redis: Redis) -> None:
    """The chat's first reply is marked as sent (just after it was sent)."""
    replied = KeySpace("sb", TOKEN.split(":")[0]).chat(CHAT).replied

    async def marked() -> bool:
        return bool(await redis.exists(replied))

    await eventually(marked, within=10, what="the reply mark")


async def test_sticker_and_edits_change_nothing(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, redis_server.url))
    try:
        telegram.send_text(CHAT, "hello")
        await telegram.wait_messages(CHAT, 1)
        await reply_marked(real_redis)
        before = await snapshot(real_redis)
        telegram.push(telegram.sticker_update(CHAT))
        texts = await telegram.wait_messages(CHAT, 2)
        assert texts[-1] == TEXTS["en"]["text_only"]
        telegram.push(telegram.message_update(CHAT, "edited text", kind="edited_message"))
        telegram.push(telegram.message_update(-100123, "a post", chat_type="channel", kind="channel_post"))
        telegram.send_text(CHAT, "/help")
        await telegram.wait_messages(CHAT, 3)
        assert len(telegram.of("sendMessage")) == 3
        assert await snapshot(real_redis) == before
        assert len(stub_llm.chat_requests) == 1
    finally:
        await bot.stop()


async def test_llm_down_gives_clear_error_and_keeps_session(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, redis_server.url))
    try:
        telegram.send_text(CHAT, "hello")
        await telegram.wait_messages(CHAT, 1)
        await reply_marked(real_redis)
        before = await snapshot(real_redis)
        stub_llm.down = True
        telegram.send_text(CHAT, "are you there?", language="ru")
        texts = await telegram.wait_messages(CHAT, 2)
        assert texts[-1] == TEXTS["ru"]["llm_unavailable"]
        assert await snapshot(real_redis) == before
        stub_llm.down = False
        telegram.send_text(CHAT, "are you there now?")
        await telegram.wait_messages(CHAT, 3)
        assert "hello" in prompt_text(stub_llm.chat_requests[-1])
    finally:
        await bot.stop()


async def test_long_reply_is_split_into_three_messages(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    paragraphs = [f"Paragraph {i:03d}: " + "x" * 84 for i in range(90)]
    reply = "\n\n".join(paragraphs)
    assert 8900 <= len(reply) <= 9100
    stub_llm.chat_replies.append(reply)
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, redis_server.url))
    try:
        telegram.send_text(CHAT, "tell me everything")
        await telegram.wait_messages(CHAT, 3)
        await telegram.wait_for(lambda: bool(telegram.calls) and len(telegram.of("sendMessage", CHAT)) == 3)
        texts = telegram.texts_to(CHAT)
        assert len(texts) == 3 and all(len(t) <= 4096 for t in texts)
        joined = "\n".join(texts)
        assert all(p in joined for p in paragraphs)
        assert all(not t.startswith("x") for t in texts), "split on paragraph boundaries"
    finally:
        await bot.stop()


async def test_drafts_in_private_chat_only(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    stub_llm.stream_chunk_chars = 8
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, redis_server.url))
    try:
        telegram.send_text(CHAT, "private question")
        await telegram.wait_messages(CHAT, 1)
        drafts = telegram.of("sendMessageDraft", CHAT)
        assert drafts and all(str(d.params["draft_id"]) != "0" for d in drafts)
        assert telegram.of("sendChatAction", CHAT)
        group = -100777
        telegram.send_text(group, "chatter between members", chat_type="supergroup")
        telegram.send_text(group, "@support_test_bot group question", chat_type="supergroup")
        await telegram.wait_messages(group, 1)
        assert len(stub_llm.chat_requests) == 2, "only the message addressed to the bot is answered"
        assert "<customer_message>\ngroup question\n" in stub_llm.chat_requests[-1]["messages"][-1]["content"]
        assert telegram.of("sendMessageDraft", group) == []
        # the final message comes after the drafts
        methods = [c.method for c in telegram.calls if str(c.params.get("chat_id")) == str(CHAT)]
        assert methods.index("sendMessage") > methods.index("sendMessageDraft")
    finally:
        await bot.stop()


async def test_a_slow_draft_does_not_hold_the_reply_back(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    """Drafts go out one at a time beside the model's stream, never in its way: while one is on its
    way the stream is read on, and the reply follows the last draft as soon as that one is answered.
    (Sent inline, each draft held the stream for a Bot API round trip: when Telegram answered slower
    than the draft interval, the stream was read one chunk per round trip.)"""
    reply = " ".join(f"word{i:03d}" for i in range(300))
    stub_llm.chat_replies.append(reply)
    stub_llm.stream_chunk_chars = 40  # 60 chunks, streamed at once
    telegram.delays["sendMessageDraft"] = 1.0
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, redis_server.url))
    try:
        telegram.send_text(CHAT, "tell me everything")
        texts = await telegram.wait_messages(CHAT, 1, within=15)
        assert texts == [reply]
        drafts = telegram.of("sendMessageDraft", CHAT)
        assert 1 <= len(drafts) <= 2, f"{len(drafts)} drafts: the stream waited for them"
        sent = telegram.of("sendMessage", CHAT)[0]
        assert sent.at >= drafts[-1].at + 0.9, "the reply waits until the last draft is answered"
    finally:
        await bot.stop()


@pytest.mark.parametrize(
    ("draft_answered_in", "settle", "waited"),
    [
        (1.0, {}, (0.9, 2.0)),  # the default settle (2 s) outlasts the draft: the error text waits for it
        (3.0, {"draft_settle_seconds": 0.3}, (0.25, 1.5)),  # DRAFT_SETTLE_SECONDS bounds the wait
    ],
    ids=["waits-for-the-draft", "bounded-by-draft-settle-seconds"],
)
async def test_a_failed_turns_error_text_comes_after_the_draft_in_flight(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    draft_answered_in: float,
    settle: dict[str, object],
    waited: tuple[float, float],
) -> None:
    stub_llm.chat_replies.append("<<length>>" + " ".join(f"word{i:03d}" for i in range(300)))  # cut off
    stub_llm.stream_chunk_chars = 40
    telegram.delays["sendMessageDraft"] = draft_answered_in
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, redis_server.url, bot=settle))
    try:
        telegram.send_text(CHAT, "tell me everything")
        assert await telegram.wait_messages(CHAT, 1, within=15) == [TEXTS["en"]["reply_truncated"]]
        draft, error = telegram.of("sendMessageDraft", CHAT)[-1], telegram.of("sendMessage", CHAT)[0]
        assert waited[0] <= error.at - draft.at < waited[1], f"the error text waited {error.at - draft.at:.2f} s"
    finally:
        await bot.stop()


async def test_a_retried_turn_is_drafted_afresh(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    """Another writer changes the chat while the model answers: the turn is produced again, and its
    drafts show the new attempt only, not the abandoned attempt's text in front of it."""
    abandoned, retried = "abandoned attempt " * 5, "retried answer " * 5
    stub_llm.chat_replies.extend([abandoned, retried])
    stub_llm.stream_chunk_chars = 18
    stub_llm.delays.extend([1.0, 0.3])  # room to interfere; the retry's drafts come past the interval
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, redis_server.url))
    try:
        telegram.send_text(CHAT, "question")

        async def asked() -> bool:
            return len(stub_llm.chat_requests) == 1

        await eventually(asked, within=30, what="the model call")
        session = await bot.store.load(CHAT)  # the turn has loaded the chat: a commit now outdates it
        await bot.store.commit_turn(CHAT, expected_version=session.version, messages=[])
        assert await telegram.wait_messages(CHAT, 1) == [retried.strip()]
        drafts = [c.params["text"] for c in telegram.of("sendMessageDraft", CHAT)]
        assert any(d.startswith("abandoned") for d in drafts), drafts
        assert any(d.startswith("retried") for d in drafts), drafts
        assert not any("abandoned" in d and "retried" in d for d in drafts), drafts
    finally:
        await bot.stop()


async def test_markdown_formatting_with_plain_fallback_and_flood_control(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    stub_llm.chat_replies.extend(["Your order is **confirmed**.", "Also **this** one."])
    telegram.faults["sendMessage"] = deque(
        [{"error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}}]
    )
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, redis_server.url))
    try:
        telegram.send_text(CHAT, "status?")
        await telegram.wait_messages(CHAT, 2)  # the 429 attempt and the retry
        sent = telegram.of("sendMessage", CHAT)[-1].params
        assert sent["text"] == "Your order is confirmed."
        assert sent["entities"][0]["type"] == "bold"
        telegram.reject_entities = True
        telegram.send_text(CHAT, "and?")
        await telegram.wait_messages(CHAT, 4)
        fallback = telegram.of("sendMessage", CHAT)[-1].params
        assert fallback["text"] == "Also this one." and not fallback.get("entities")
    finally:
        await bot.stop()


async def test_too_long_message_gets_limits_in_users_language(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    bot = await start_bot(
        make_settings(
            telegram.base_url, stub_llm.base_url, redis_server.url, chat_input_token_budget=700, summary_max_tokens=100
        )
    )
    try:
        telegram.send_text(CHAT, "слово " * 600, language="ru")
        texts = await telegram.wait_messages(CHAT, 1)
        assert texts[0].startswith("Сообщение слишком длинное:") and "лимите" in texts[0]
        assert stub_llm.requests == []
        assert await snapshot(real_redis) == {}
    finally:
        await bot.stop()
