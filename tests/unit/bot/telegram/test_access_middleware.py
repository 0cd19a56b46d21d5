"""AccessMiddleware hands the chat handler the customer's text: in a group, without the mention of the
bot that addressed it; elsewhere, as typed."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from aiogram.types import Chat, Message, MessageEntity, User

from bot.factory import build_bot
from bot.settings import BotSettings
from bot.telegram.middlewares.access import AccessMiddleware
from bot.telegram.texts import Texts
from tests.stubs.telegram_server import StubTelegram


def message(text: str, chat_type: str) -> Message:
    mention = [MessageEntity(type="mention", offset=0, length=17)] if text.startswith("@") else None
    return Message(
        message_id=1, date=datetime.datetime.now(), chat=Chat(id=-100 if chat_type != "private" else 5, type=chat_type),
        from_user=User(id=5, is_bot=False, first_name="Ann"), text=text, entities=mention,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "chat_type", "customer_text"),
    [
        ("@support_test_bot where is my order?", "supergroup", "where is my order?"),
        ("@support_test_bot where is my order?", "private", "@support_test_bot where is my order?"),
        ("where is my order?", "private", "where is my order?"),
    ],
)
async def test_the_handler_gets_the_customer_text(
    telegram: StubTelegram, monkeypatch: pytest.MonkeyPatch, text: str, chat_type: str, customer_text: str
) -> None:
    monkeypatch.setenv("BOT_TOKEN", "123456:" + "A" * 35)
    settings = BotSettings(_env_file=None, telegram_api_url=telegram.base_url)  # type: ignore[call-arg]
    bot = build_bot(settings)
    seen: list[dict[str, Any]] = []

    async def handler(event: Any, data: dict[str, Any]) -> None:
        seen.append(data)

    try:
        data = {"settings": settings, "bot": bot, "say": Texts("en")}
        await AccessMiddleware()(handler, message(text, chat_type), data)
    finally:
        await bot.session.close()
    assert [data.get("customer_text") for data in seen] == [customer_text]
