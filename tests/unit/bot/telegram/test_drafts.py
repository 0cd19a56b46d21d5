"""Drafts go out beside the model's stream, one at a time: the stream is read on while Telegram
answers, the reply waits for the draft in flight, a refused draft turns drafts off and a draft that
found the chat's lease gone ends the turn (real aiogram Bot against the stub Bot API)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator

import pytest
from aiogram import Bot

from bot.factory import build_bot
from bot.settings import BotSettings
from bot.telegram.drafts import DraftStreamer
from services.core.errors import LeaseLostError
from services.core.fence import CURRENT_FENCE, Fence
from tests.stubs.telegram_server import StubTelegram

CHAT = 31


@pytest.fixture
async def bot(telegram: StubTelegram, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bot]:
    monkeypatch.setenv("BOT_TOKEN", "123456:" + "A" * 35)
    bot = build_bot(BotSettings(_env_file=None, telegram_api_url=telegram.base_url))  # type: ignore[call-arg]
    yield bot
    await bot.session.close()


def streamer(bot: Bot) -> DraftStreamer:
    return DraftStreamer(bot=bot, chat_id=CHAT, draft_id=5, interval=0.1)


async def test_the_stream_is_read_on_while_a_draft_is_on_its_way(bot: Bot, telegram: StubTelegram) -> None:
    telegram.delays["sendMessageDraft"] = 0.5
    drafts = streamer(bot)
    await drafts.on_delta("first ")
    await telegram.wait_for(lambda: len(telegram.of("sendMessageDraft")) == 1)
    for n in range(50):  # each would have waited for a draft's answer when sent inline
        await drafts.on_delta(f"word{n} ")
    assert [c.params["text"] for c in telegram.of("sendMessageDraft")] == ["first "]
    await drafts.finish()
    assert drafts.sent == 1
    await drafts.on_delta("late ")  # after finish: no draft can overtake the reply
    await asyncio.sleep(0.15)
    assert len(telegram.of("sendMessageDraft")) == 1


async def test_the_next_draft_shows_everything_read_meanwhile(bot: Bot, telegram: StubTelegram) -> None:
    telegram.delays["sendMessageDraft"] = 0.2
    drafts = streamer(bot)
    await drafts.on_delta("one ")
    for word in ("two ", "three "):
        await drafts.on_delta(word)
    await telegram.wait_for(lambda: drafts.sent == 1)
    await drafts.on_delta("four")
    await drafts.finish()
    assert [c.params["text"] for c in telegram.of("sendMessageDraft")] == ["one ", "one two three four"]


async def test_a_restarted_stream_is_drafted_afresh(bot: Bot, telegram: StubTelegram) -> None:
    """The engine retried the turn: the next draft shows the new attempt only, not the abandoned
    attempt's text in front of it."""
    drafts = DraftStreamer(bot=bot, chat_id=CHAT, draft_id=5, interval=0.0)
    await drafts.on_delta("abandoned ")
    await telegram.wait_for(lambda: drafts.sent == 1)
    drafts.restart()
    await drafts.on_delta("retried")
    await drafts.finish()
    assert [c.params["text"] for c in telegram.of("sendMessageDraft")] == ["abandoned ", "retried"]


async def test_a_restart_waits_for_the_old_attempts_draft_in_flight(bot: Bot, telegram: StubTelegram) -> None:
    """Restarted while the abandoned attempt's draft is on its way: that draft still goes first, the new
    attempt's after it is answered, and the reply after both (none may overtake another)."""
    telegram.delays["sendMessageDraft"] = 0.3
    drafts = DraftStreamer(bot=bot, chat_id=CHAT, draft_id=5, interval=0.0)
    await drafts.on_delta("abandoned ")
    await telegram.wait_for(lambda: len(telegram.of("sendMessageDraft")) == 1)
    drafts.restart()
    await drafts.on_delta("retried ")  # the old draft is still in flight: only collected
    await telegram.wait_for(lambda: drafts.sent == 1)
    await drafts.on_delta("answer")
    await drafts.finish()
    await bot.send_message(CHAT, "retried answer")
    sent = [(c.method, c.params["text"]) for c in telegram.calls if c.method in ("sendMessageDraft", "sendMessage")]
    assert sent == [
        ("sendMessageDraft", "abandoned "),
        ("sendMessageDraft", "retried answer"),
        ("sendMessage", "retried answer"),
    ]
    first, second = telegram.of("sendMessageDraft")
    assert second.at >= first.at + 0.25, "the new attempt's draft waited for the old one's answer"


async def test_a_refused_draft_turns_drafts_off(bot: Bot, telegram: StubTelegram) -> None:
    telegram.faults["sendMessageDraft"] = deque([{"error_code": 400, "description": "Bad Request: nope"}])
    drafts = streamer(bot)
    await drafts.on_delta("one ")
    await telegram.wait_for(lambda: not drafts.enabled)
    await asyncio.sleep(0.1)  # the interval passed: "two" would have been a draft
    await drafts.on_delta("two")
    await drafts.finish()
    assert not drafts.enabled and drafts.sent == 0 and len(telegram.of("sendMessageDraft")) == 1


async def test_a_draft_that_found_the_lease_gone_ends_the_turn(bot: Bot, telegram: StubTelegram) -> None:
    async def turn() -> None:
        CURRENT_FENCE.set(Fence("w:1", valid_until=time.monotonic() - 1))  # the lease ran out
        drafts = streamer(bot)
        await drafts.on_delta("one ")
        with pytest.raises(LeaseLostError):
            await drafts.finish()
        drafts = streamer(bot)
        with pytest.raises(LeaseLostError):  # or on a delta after it failed
            for _ in range(1000):
                await drafts.on_delta("more ")
                await asyncio.sleep(0.01)

    await asyncio.create_task(turn())  # a context of its own, as the worker gives each item
    assert telegram.of("sendMessageDraft") == []


async def test_abandon_cancels_the_draft_in_flight(bot: Bot, telegram: StubTelegram) -> None:
    telegram.delays["sendMessageDraft"] = 0.3
    drafts = streamer(bot)
    await drafts.on_delta("one ")
    await telegram.wait_for(lambda: len(telegram.of("sendMessageDraft")) == 1)
    await drafts.abandon()
    await asyncio.sleep(0.6)  # the answer would have come by now
    assert drafts.sent == 0 and not drafts.enabled


async def test_settle_waits_for_the_draft_in_flight_then_gives_up(bot: Bot, telegram: StubTelegram) -> None:
    telegram.delays["sendMessageDraft"] = 0.3
    drafts = streamer(bot)
    await drafts.on_delta("one ")
    await drafts.settle(within=10)
    assert drafts.sent == 1 and not drafts.enabled
    telegram.delays["sendMessageDraft"] = 30
    drafts = streamer(bot)
    await drafts.on_delta("one ")
    await asyncio.wait_for(drafts.settle(within=0.2), 5)  # not the 30 s the answer would take
    assert drafts.sent == 0
