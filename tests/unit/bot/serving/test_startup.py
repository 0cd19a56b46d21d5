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
from aiogram.exceptions import TelegramBadRequest
from aiogram.methods import GetMe

from bot.serving.startup import StartupError, with_startup_retries
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

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


async def test_a_bot_api_without_getme_is_named_too(telegram: StubTelegram) -> None:
    """A 404 in the Bot API's own JSON (a path that is not a Bot API's, or a token Telegram does not know
    the shape of): the same one line, at once."""
    telegram.broken["getMe"] = "missing"
    bot = bot_at(telegram.base_url)
    try:
        with pytest.raises(StartupError) as caught:
            await with_startup_retries("connecting to Telegram", bot.get_me, attempts=50, first_delay=5)
    finally:
        await bot.session.close()
    assert "TELEGRAM_API_URL does not answer like a Telegram Bot API (404 Not Found)" in str(caught.value)


async def test_a_proxy_error_page_is_one_line(telegram: StubTelegram) -> None:
    """An HTML error page instead of the Bot API's JSON (a proxy in front): one line, not a traceback."""
    telegram.broken["setMyCommands"] = "html_500"
    bot = bot_at(telegram.base_url)
    try:
        with pytest.raises(StartupError) as caught:
            await with_startup_retries("registering the bot commands", lambda: bot.set_my_commands([]), attempts=2)
    finally:
        await bot.session.close()
    message = str(caught.value)
    assert message.startswith("registering the bot commands: TELEGRAM_API_URL does not answer") and "\n" not in message
    assert SECRET_PART[:6] not in message


async def test_a_call_the_bot_api_refuses_is_its_description() -> None:
    async def refused() -> None:
        raise TelegramBadRequest(method=GetMe(), message="Bad Request: BOT_COMMAND_INVALID")

    with pytest.raises(StartupError) as caught:
        await with_startup_retries("registering the bot commands", refused, attempts=3)
    assert str(caught.value) == (
        "registering the bot commands: the Bot API refused it (TelegramBadRequest: Bad Request: BOT_COMMAND_INVALID)"
    )
