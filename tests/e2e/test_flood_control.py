"""A 429 on a draft or on "typing…" does not hold back the answer (the real aiogram bot against the
stub Bot API, in-process)."""

from __future__ import annotations

from collections import deque

from tests.e2e.harness import make_settings, start_bot
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

CHAT = 5150


def flood(retry_after: int) -> deque[dict[str, object]]:
    return deque(
        [
            {
                "error_code": 429,
                "description": f"Too Many Requests: retry after {retry_after}",
                "parameters": {"retry_after": retry_after},
            }
        ]
    )


async def test_flooded_previews_are_dropped_and_the_answer_is_not_delayed(
    telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    stub_llm.chat_replies.append("A long enough answer, streamed in several pieces. " * 6)
    telegram.faults["sendMessageDraft"] = flood(4)
    telegram.faults["sendChatAction"] = flood(4)
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, None))
    try:
        asked = telegram.send_text(CHAT, "where is my order?")
        await telegram.wait_messages(CHAT, 1, within=10)
    finally:
        await bot.stop()
    answered = telegram.of("sendMessage", CHAT)[0].at
    first_action = telegram.of("sendChatAction", CHAT)[0].at
    assert answered - first_action < 3, "the answer did not wait out a preview's retry_after=4"
    assert len(telegram.of("sendMessageDraft", CHAT)) == 1, "a flooded draft is not retried; drafts stop"
    assert len(telegram.of("sendChatAction", CHAT)) == 1, "a flooded chat action is not retried"
    assert asked["update_id"] > 0
