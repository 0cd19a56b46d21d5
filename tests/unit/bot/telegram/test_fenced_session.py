"""The Bot API session re-checks the chat's lease once a request has its connection: a request that
waited (for a connection, or in a process frozen past its lease) is not sent once the lease may be
gone, so a reply cannot reach the customer after the chat's next worker answered too."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import AsyncIterator

import pytest
from aiogram import Bot

from bot.factory import build_bot
from bot.settings import BotSettings
from bot.telegram.session import FencedSession
from services.core.errors import LeaseLostError
from services.core.fence import CURRENT_FENCE, Fence
from tests.stubs.telegram_server import StubTelegram


@pytest.fixture
async def one_connection_bot(telegram: StubTelegram, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bot]:
    """The bot as the factory builds it, with its connection pool cut to one connection."""
    monkeypatch.setenv("BOT_TOKEN", "123456:" + "A" * 35)
    bot = build_bot(BotSettings(_env_file=None, telegram_api_url=telegram.base_url))  # type: ignore[call-arg]
    assert isinstance(bot.session, FencedSession)
    bot.session.limit = 1
    yield bot
    await bot.session.close()


class ExpiresAfterChecks(Fence):
    """A fence that is valid for its first ``valid_checks`` checks and expired from then on (a worker
    frozen between two of them)."""

    valid_checks = 1

    def remaining(self) -> float:
        self.valid_checks -= 1
        return 30.0 if self.valid_checks >= 0 else -1.0


def in_chat_context(fence: Fence) -> contextvars.Context:
    context = contextvars.copy_context()
    context.run(CURRENT_FENCE.set, fence)
    return context


async def test_a_request_whose_lease_ran_out_while_it_waited_for_a_connection_is_not_sent(
    one_connection_bot: Bot, telegram: StubTelegram
) -> None:
    bot = one_connection_bot
    holding = asyncio.create_task(bot.get_updates(timeout=10))  # the only connection, held by a long poll
    await telegram.wait_for(lambda: telegram._polling == 1)
    fence = Fence("w:1", valid_until=time.monotonic() + 30)
    reply = asyncio.create_task(bot.send_message(7, "the answer"), context=in_chat_context(fence))
    await asyncio.sleep(0)  # it waits for the connection, its fence still valid
    fence.valid_until = time.monotonic() - 1  # meanwhile the lease ran out (the worker was frozen)
    telegram.push(telegram.message_update(8, "wake the long poll"))  # the connection comes free
    with pytest.raises(LeaseLostError):
        await reply
    await holding
    assert telegram.of("sendMessage") == [], "a reply was sent after its lease may have expired"
    # the refused request gave its connection back: the next one goes through on it (a leaked pool slot
    # would make it wait for aiogram's 60 s timeout)
    assert (await asyncio.wait_for(bot.send_message(7, "unfenced"), 5)).text == "unfenced"


async def test_requests_with_a_valid_lease_or_no_fence_are_sent(
    one_connection_bot: Bot, telegram: StubTelegram
) -> None:
    fence = Fence("w:1", valid_until=time.monotonic() + 30)
    await asyncio.create_task(one_connection_bot.send_message(7, "fenced"), context=in_chat_context(fence))
    await one_connection_bot.send_message(7, "outside any chat's work")
    assert telegram.texts_to(7) == ["fenced", "outside any chat's work"]


async def test_a_request_whose_lease_ran_out_after_it_got_its_connection_writes_nothing(
    one_connection_bot: Bot, telegram: StubTelegram
) -> None:
    """aiohttp writes the request (headers buffered with the body) from a task of its own, a loop
    iteration after the connection was handed out: the lease is checked again there."""
    bot = one_connection_bot
    await bot.send_message(7, "warm")  # a pooled connection: connect() hands it out at once
    fence = ExpiresAfterChecks("w:1", valid_until=0)  # valid when connected, expired when writing
    with pytest.raises(LeaseLostError):
        await asyncio.create_task(bot.send_message(7, "the answer"), context=in_chat_context(fence))
    assert fence.valid_checks < 0, "checked when connected and again when writing"
    assert telegram.texts_to(7) == ["warm"]
    sent = await asyncio.wait_for(bot.send_message(7, "next"), 5)
    assert sent.text == "next", "the pool goes on (a fresh connection)"


async def test_a_late_typing_indicator_is_not_refused(one_connection_bot: Bot, telegram: StubTelegram) -> None:
    """ "typing…" shown late duplicates nothing; refused, it would end aiogram's typing task with an
    exception nobody awaits."""
    expired = Fence("w:1", valid_until=time.monotonic() - 1)
    call = one_connection_bot.send_chat_action(7, "typing")
    assert await asyncio.create_task(call, context=in_chat_context(expired))
    assert len(telegram.of("sendChatAction", 7)) == 1


def test_a_proxy_is_refused_rather_than_left_unfenced() -> None:
    with pytest.raises(TypeError, match="proxy"):
        FencedSession(proxy="socks5://127.0.0.1:1080")


async def test_a_reply_under_way_is_counted_in_flight_and_a_draft_or_typing_is_not(
    one_connection_bot: Bot, telegram: StubTelegram
) -> None:
    """The heartbeat lets a request to the customer that is under way finish when the lease is lost
    (``Fence.in_flight``): the count covers the request until Telegram's answer is in."""
    bot = one_connection_bot
    bot.session.limit = 2  # type: ignore[attr-defined]  # the typing request must not wait for the reply's
    fence = Fence("w:1", valid_until=time.monotonic() + 30)
    held = telegram.gates["sendMessage"] = asyncio.Event()
    reply = asyncio.create_task(bot.send_message(7, "the answer"), context=in_chat_context(fence))
    await telegram.wait_for(lambda: len(telegram.of("sendMessage")) == 1)
    assert fence.in_flight == 1
    await asyncio.create_task(bot.send_chat_action(7, "typing"), context=in_chat_context(fence))
    assert fence.in_flight == 1
    held.set()
    await reply
    assert fence.in_flight == 0
