"""Provider faults end to end, in-process mode (issue 26): a real aiogram Bot against the stub Bot API,
a real AsyncOpenAI against the stub model server. A broken answer is never delivered nor stored; the
provider's Retry-After holds for every chat of the process; one question makes a bounded number of
model requests."""

from __future__ import annotations

import logging
import time

import pytest

from bot.telegram.texts import TEXTS
from tests.e2e.harness import RunningBot, make_settings, start_bot
from tests.stubs.openai_server import StubBroken, StubOpenAI, rate_limited
from tests.stubs.telegram_server import StubTelegram

UNAVAILABLE = TEXTS["en"]["llm_unavailable"]


async def bot_with(telegram: StubTelegram, stub_llm: StubOpenAI, **llm: object) -> RunningBot:
    settings = make_settings(telegram.base_url, stub_llm.base_url, None)
    settings.llm = settings.llm.model_copy(
        update={"llm_retry_base_seconds": 0.01, "llm_retry_max_seconds": 0.05, "openai_timeout_seconds": 5} | llm
    )
    return await start_bot(settings)


@pytest.mark.parametrize("fault", ["no_finish", "cut"])
async def test_a_truncated_stream_is_neither_delivered_nor_stored(
    telegram: StubTelegram, stub_llm: StubOpenAI, fault: str
) -> None:
    """Regression: a stream that ended without a finish reason was sent as the answer and stored."""
    bot = await bot_with(telegram, stub_llm, openai_max_retries=2)
    try:
        stub_llm.chat_replies.append(StubBroken("Your refund of 40 EUR was appro", fault))  # type: ignore[arg-type]
        telegram.send_text(801, "where is my refund?")
        assert await telegram.wait_messages(801, 1) == [UNAVAILABLE]
        assert (await bot.store.load(801)).messages == ()
        telegram.send_text(801, "hello again")
        texts = await telegram.wait_messages(801, 2)
        assert texts[1] == "Support answer to: hello again"
        assert [m.content for m in (await bot.store.load(801)).messages] == ["hello again", texts[1]]
    finally:
        await bot.stop()


async def test_a_malformed_chunk_is_a_provider_failure_not_a_bot_bug(
    telegram: StubTelegram, stub_llm: StubOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: the SDK's bare JSONDecodeError was logged as "unexpected error" with a traceback
    and answered with the internal-error text."""
    caplog.set_level(logging.WARNING)
    bot = await bot_with(telegram, stub_llm)
    try:
        stub_llm.chat_replies.append(StubBroken("Your order", "malformed"))
        telegram.send_text(802, "order status?")
        assert await telegram.wait_messages(802, 1) == [UNAVAILABLE]
        assert "unexpected error" not in caplog.text
        assert [r.getMessage() for r in caplog.records if r.exc_info] == [], "no traceback: a provider failure"
        assert "LLMIncompleteReplyError" in caplog.text
        assert (await bot.store.load(802)).messages == ()
    finally:
        await bot.stop()


async def test_a_retry_after_holds_for_every_chat_of_the_process(telegram: StubTelegram, stub_llm: StubOpenAI) -> None:
    """A 429 with Retry-After: 1 for one chat: no request of any chat reaches the provider sooner."""
    bot = await bot_with(telegram, stub_llm, openai_max_retries=2)
    try:
        stub_llm.chat_replies.append(rate_limited(retry_after="1"))
        telegram.send_text(803, "first customer")
        await telegram.wait_for(lambda: len(stub_llm.requests) == 1)
        telegram.send_text(804, "second customer")
        await telegram.wait_messages(803, 1)
        await telegram.wait_messages(804, 1)
        limited = stub_llm.request_times[0]
        assert [round(t - limited, 2) for t in stub_llm.request_times[1:] if t - limited < 1.0] == []
        assert telegram.texts_to(804) == ["Support answer to: second customer"]
    finally:
        await bot.stop()


async def test_a_persistent_429_costs_a_bounded_number_of_requests(
    telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    """Every request answered 429: one question makes at most 1 + OPENAI_MAX_RETRIES requests (the
    SDK's retries are not multiplied in); a Retry-After too long to wait in the call is not slept: the
    customer is told at once, and the next question makes no request before that time."""
    bot = await bot_with(telegram, stub_llm, openai_max_retries=2)
    try:
        stub_llm.always = rate_limited(retry_after_ms="50")
        telegram.send_text(805, "are you there?")
        assert await telegram.wait_messages(805, 1) == [UNAVAILABLE]
        assert len(stub_llm.requests) == 3
        stub_llm.always = rate_limited(retry_after="30")
        started = time.monotonic()
        telegram.send_text(806, "hello?")
        assert await telegram.wait_messages(806, 1, within=10) == [UNAVAILABLE]
        telegram.send_text(807, "anyone?")
        assert await telegram.wait_messages(807, 1, within=10) == [UNAVAILABLE]
        assert len(stub_llm.requests) == 4 and time.monotonic() - started < 25  # no 30 s wait in a turn
    finally:
        await bot.stop()
