"""Which failures of Telegram's edge are retried: a Bot API answer that is not a Bot API answer (a
proxy's HTML error page, a cut body) is the network's fault, like a 5xx, not a reason to drop the turn."""

from __future__ import annotations

import json

from aiogram.exceptions import ClientDecodeError, TelegramBadRequest
from aiogram.methods import SendMessage

from bot.serving.failures import is_transient


def test_an_undecodable_bot_api_answer_is_transient() -> None:
    try:
        json.loads("<html>502 Bad Gateway</html>")
    except ValueError as exc:
        error = ClientDecodeError("Failed to decode object", exc, "<html>502 Bad Gateway</html>")
    assert is_transient(error)


def test_a_bot_api_refusal_is_not() -> None:
    assert not is_transient(TelegramBadRequest(SendMessage(chat_id=1, text="x"), "Bad Request: chat not found"))
