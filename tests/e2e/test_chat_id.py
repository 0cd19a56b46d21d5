"""Finding OPERATOR_CHAT_ID: ``/chatid`` in a group answers the group's id and whether it can be the
operators' desk (a supergroup with Topics), through the real Bot and Dispatcher against the stub Bot
API; the model is never asked."""

from __future__ import annotations

from bot.telegram.texts import text
from tests.e2e.harness import make_settings, start_bot
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

FORUM = -1001234567890
GROUP = -4055512345


async def test_chatid_tells_a_group_its_id_and_what_to_set(telegram: StubTelegram, stub_llm: StubOpenAI) -> None:
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, None))
    try:
        forum = telegram.message_update(FORUM, "/chatid", chat_type="supergroup")
        forum["message"]["chat"]["is_forum"] = True
        telegram.push(forum)
        assert await telegram.wait_messages(FORUM, 1) == [text("en", "chat_id_forum", chat_id=FORUM)]
        assert f"OPERATOR_CHAT_ID={FORUM}" in telegram.texts_to(FORUM)[0]

        telegram.send_text(GROUP, "/chatid", chat_type="group", language="ru")
        assert await telegram.wait_messages(GROUP, 1) == [text("ru", "chat_id_group", chat_id=GROUP)]

        telegram.send_text(77, "/chatid")
        assert await telegram.wait_messages(77, 1) == [text("en", "chat_id_private", chat_id=77)]
        assert stub_llm.chat_requests == []
    finally:
        await bot.stop()
