"""Flood control: previews fail at once on 429, real messages wait within the caps; drafts are cut in
UTF-16 units as Telegram counts them."""

from __future__ import annotations

import gc
import time
import weakref
from typing import Any

import pytest
from aiogram.exceptions import TelegramRetryAfter
from aiogram.methods import SendChatAction, SendMessage, SendMessageDraft, TelegramMethod
from aiogram.methods.base import Response
from aiogram.types import Message

from bot.factory import build_bot
from bot.settings import BotSettings
from bot.telegram.middlewares.flood import RetryAfterMiddleware
from bot.telegram.utf16 import utf16_tail, utf16_units
from tests.stubs.telegram_server import StubTelegram


class FloodedTelegram:
    """The next step of the middleware chain: answers 429 ``floods`` times, then succeeds."""

    def __init__(self, floods: int, retry_after: int) -> None:
        self.floods = floods
        self.retry_after = retry_after
        self.calls = 0

    async def __call__(self, _bot: Any, method: TelegramMethod[Any]) -> Any:
        self.calls += 1
        if self.calls <= self.floods:
            raise TelegramRetryAfter(method=method, message="Too Many Requests", retry_after=self.retry_after)
        return True


@pytest.mark.parametrize(
    "method",
    [SendMessageDraft(chat_id=1, draft_id=1, text="partial"), SendChatAction(chat_id=1, action="typing")],
)
async def test_previews_are_never_retried(method: TelegramMethod[Any]) -> None:
    telegram = FloodedTelegram(floods=1, retry_after=30)
    started = time.monotonic()
    with pytest.raises(TelegramRetryAfter):
        await RetryAfterMiddleware(retries=3, max_wait=60)(telegram, None, method)  # type: ignore[arg-type]
    assert telegram.calls == 1 and time.monotonic() - started < 15  # no 30 s wait (however busy the machine)


async def test_a_real_message_waits_and_is_sent() -> None:
    telegram = FloodedTelegram(floods=2, retry_after=0)
    message = SendMessage(chat_id=1, text="the answer")
    assert await RetryAfterMiddleware(retries=3, max_wait=10)(telegram, None, message) is True  # type: ignore[arg-type]
    assert telegram.calls == 3


async def test_waits_are_capped_in_count_and_total_time() -> None:
    message = SendMessage(chat_id=1, text="the answer")
    too_long = FloodedTelegram(floods=1, retry_after=31)
    started = time.monotonic()
    with pytest.raises(TelegramRetryAfter):
        await RetryAfterMiddleware(retries=3, max_wait=30)(too_long, None, message)  # type: ignore[arg-type]
    assert too_long.calls == 1 and time.monotonic() - started < 15, "raised at once, no 31 s wait"
    too_many = FloodedTelegram(floods=5, retry_after=0)
    with pytest.raises(TelegramRetryAfter):
        await RetryAfterMiddleware(retries=2, max_wait=30)(too_many, None, message)  # type: ignore[arg-type]
    assert too_many.calls == 3


def test_utf16_units_count_astral_characters_twice() -> None:
    assert utf16_units("abc") == 3
    assert utf16_units("😀") == 2
    assert utf16_units("привет😀") == 8


def test_draft_tail_fits_telegrams_limit_without_splitting_a_character() -> None:
    text = "x" + "😀" * 3000  # 6001 units, 3001 code points
    tail = utf16_tail(text, 4096)
    assert utf16_units(tail) == 4096 and tail == "😀" * 2048
    odd = utf16_tail("a😀😀", 3)  # 5 units: the longest end within 3 is one emoji (2), never half of one
    assert odd == "😀"
    assert utf16_tail("short", 4096) == "short"
    assert utf16_tail("abc", 0) == ""


async def test_response_models_survive_the_garbage_collector(telegram: StubTelegram) -> None:
    """aiogram parametrizes ``Response[T]`` per request and pydantic keeps it only weakly: without a
    reference the cyclic GC drops it and the next request builds it again (~5 ms of CPU each time)."""
    settings = BotSettings(_env_file=None, bot_token="123456:TEST-token", telegram_api_url=telegram.base_url)  # type: ignore[call-arg]
    bot = build_bot(settings)
    try:
        await bot.send_chat_action(1, "typing")
        await bot.send_message(1, "hello")
        built = [weakref.ref(Response[bool]), weakref.ref(Response[Message])]  # type: ignore[valid-type]
        gc.collect()
        assert all(ref() is not None for ref in built), "a response model was dropped and must be rebuilt"
    finally:
        await bot.session.close()
