"""A summary model the provider refuses (404 model_not_found on summary requests only), end to end in
one process: the real aiogram Bot and Dispatcher against the stub Bot API, the real AsyncOpenAI against
the stub model. The operator sees it as for chat calls (the provider watch behind the ERROR line, the
gauge and /readyz), and a handoff still starts and ends, its summaries made by identifiers."""

from __future__ import annotations

import logging

import pytest

from bot.metrics import LLM_PROVIDER_REFUSING
from bot.telegram.texts import TEXTS
from tests.e2e.harness import make_settings, start_bot
from tests.e2e.test_handoff import CHAT, DECISION, GROUP, wait_topic
from tests.stubs.openai_server import MODEL_NOT_FOUND, StubOpenAI
from tests.stubs.telegram_server import StubTelegram


async def test_a_refused_summary_model_is_operator_visible_and_a_handoff_still_ends(
    telegram: StubTelegram, stub_llm: StubOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    stub_llm.summary_replies.extend([MODEL_NOT_FOUND] * 10)
    caplog.set_level(logging.ERROR, logger="bot.provider_health")
    settings = make_settings(telegram.base_url, stub_llm.base_url, None, bot={"operator_chat_id": GROUP})
    bot = await start_bot(settings)
    provider = bot.provider
    assert provider is not None
    try:
        telegram.send_text(CHAT, "My order 7718 arrived with a cracked stand.")
        await telegram.wait_messages(CHAT, 1)
        assert provider.healthy, "the chat call was accepted"
        telegram.send_text(CHAT, "/operator")
        thread = await wait_topic(telegram)
        await telegram.wait_for(lambda: TEXTS["en"]["handoff_started"] in telegram.texts_to(CHAT))
        ticket = "\n".join(c.params["text"] for c in telegram.in_topic(thread, "sendMessage"))
        assert "7718" in ticket
        assert not provider.healthy and LLM_PROVIDER_REFUSING.labels("summary")._value.get() == 1
        errors = [r.getMessage() for r in caplog.records if r.name == "bot.provider_health"]
        assert errors and "summary calls" in errors[0] and "SUMMARY_MODEL" in errors[0]

        telegram.push(telegram.operator_update(GROUP, thread, DECISION + " Tracking 55012-1299."))
        telegram.push(telegram.operator_update(GROUP, thread, "/close"))
        await telegram.wait_for(lambda: TEXTS["en"]["handoff_closed"] in telegram.texts_to(CHAT), within=30)
        summary = (await bot.store.load(CHAT)).summary
        assert summary is not None and "55012-1299" in " ".join(summary.key_facts), "folded by identifiers"
        assert len(stub_llm.summary_requests) == 2, "the ticket and the transcript: one refused request each"
    finally:
        provider.accepted("summary")
        await bot.stop()
        await bot.chat.close()
