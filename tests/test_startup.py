"""Start-up calls to the Bot API through a real aiogram Bot: a server that answers, but not like a Bot
API, is one line naming TELEGRAM_API_URL at once (no retries, no traceback, no token); one that never
answers is retried a bounded number of times, then one line naming the setting to check."""

from __future__ import annotations

import secrets
import socket

import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer

from bot.serving.startup import StartupError, with_startup_retries
from tests.stubs.openai_server import StubOpenAI

SECRET_PART = secrets.token_urlsafe(30)
TOKEN = f"5550001:{SECRET_PART}"


def bot_at(base: str) -> Bot:
    return Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(base)))


async def test_a_server_that_is_not_a_bot_api_is_one_line_at_once(stub_llm: StubOpenAI) -> None:
    bot = bot_at(stub_llm.base_url.removesuffix("/v1"))  # an HTTP server, answering 404 pages to getMe
    try:
        with pytest.raises(StartupError) as caught:
            await with_startup_retries("connecting to Telegram", bot.get_me, attempts=50, first_delay=5)
    finally:
        await bot.session.close()
    message = str(caught.value)
    assert "TELEGRAM_API_URL does not answer like a Telegram Bot API" in message and "\n" not in message
    assert SECRET_PART[:6] not in message and SECRET_PART[-6:] not in message


async def test_a_server_nobody_answers_for_is_retried_then_named() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bot = bot_at(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(StartupError) as caught:
            await with_startup_retries("connecting to Telegram", bot.get_me, attempts=2, first_delay=0.01)
    finally:
        await bot.session.close()
    message = str(caught.value)
    assert "still failing after 2 attempts" in message and "check TELEGRAM_API_URL" in message, message
