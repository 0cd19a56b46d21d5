"""A Bot API server that lacks the optional methods (command menu, "typing…", drafts) or answers them
with something that is not a Bot API answer, and one that does not long-poll: ``python -m bot`` in both
modes starts, answers, logs each cause once, and does not poll in a tight loop (issue 26, item 7)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.telegram.texts import TEXTS
from tests.conftest import RedisServer
from tests.e2e.harness import make_settings, start_bot
from tests.e2e.processes import BotProcess, base_env
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

OPTIONAL = ("setMyCommands", "sendChatAction", "sendMessageDraft")
MODES = ["in-process", "queued"]


def env_for(mode: str, telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer) -> dict[str, str]:
    env = base_env(telegram, stub_llm) | {"DRAFT_INTERVAL_SECONDS": "0.1", "OPTIONAL_CALL_TIMEOUT_SECONDS": "1"}
    if mode == "queued":
        env |= {"REDIS_URL": redis_server.url, "POLLING_TIMEOUT_SECONDS": "1", "WORKER_IDLE_WAIT_SECONDS": "0.2"}
    return env


def failure_lines(log: str, method: str) -> list[str]:
    return [line for line in log.splitlines() if f"optional Bot API call {method} failed (" in line]


async def answers(bot: BotProcess, telegram: StubTelegram, chat_id: int, count: int, within: float) -> list[str]:
    """The texts sent to ``chat_id`` once there are ``count``; fails at once if the bot stopped."""
    assert bot.process is not None
    process = bot.process
    await telegram.wait_for(
        lambda: len(telegram.of("sendMessage", chat_id)) >= count or process.returncode is not None, within
    )
    assert process.returncode is None, f"the bot stopped:\n{bot.log.decode(errors='replace')}"
    return telegram.texts_to(chat_id)


KINDS = ("missing", "html_500")
PER_TURN = ("sendChatAction", "sendMessageDraft")


@pytest.mark.parametrize("mode", MODES)
async def test_a_bot_api_without_the_comforts_and_long_polling_still_serves(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,  # flushed: the poller's offset of an earlier test would skip this one's updates
    tmp_path: Path,
    processes: list[BotProcess],
    mode: str,
) -> None:
    """One process per mode meets both kinds of failure: the per-turn methods answer "missing" for two
    questions, then an HTML 500 for two more (each kind logged once, its repeat not); the menu
    (asked once, at start-up) gets one kind per mode."""
    first, second = KINDS if mode == "in-process" else KINDS[::-1]
    telegram.broken = dict.fromkeys(PER_TURN, first) | {"setMyCommands": first}
    telegram.instant_get_updates = True  # and getUpdates does not long-poll: it answers at once
    bot = BotProcess(env_for(mode, telegram, stub_llm, redis_server), tmp_path)
    processes.append(bot)
    await bot.start()
    telegram.send_text(61, "Where is my order 5521?")
    assert (await answers(bot, telegram, 61, 1, within=60))[0].startswith("Support answer to: Where is my order")
    telegram.send_text(61, "/new")
    assert (await answers(bot, telegram, 61, 2, within=10))[1] == TEXTS["en"]["new_done"]
    telegram.send_text(61, "And my refund?")
    await answers(bot, telegram, 61, 3, within=10)
    tried_first = {method: len(telegram.of(method)) for method in OPTIONAL}
    telegram.broken |= dict.fromkeys(PER_TURN, second)
    for n, question in enumerate(("Is it shipped?", "When does it arrive?"), start=4):
        telegram.send_text(61, question)
        await answers(bot, telegram, 61, n, within=10)
    # a measurement window, not a wait for something: how often does the bot poll while nothing comes?
    before, window = len(telegram.polls), 1.5
    await asyncio.sleep(window)
    rate = (len(telegram.polls) - before) / window
    assert rate < 3, f"{rate:.0f} getUpdates per second against a server that does not long-poll"
    for method in OPTIONAL:  # every optional method was tried and failed (twice per kind for "typing…")
        assert tried_first[method], method
    for method in PER_TURN:
        assert len(telegram.of(method)) > tried_first[method], f"{method} not tried after the switch"
    assert (
        tried_first["sendChatAction"] >= 2 and len(telegram.of("sendChatAction")) - tried_first["sendChatAction"] >= 2
    )
    assert await bot.stop() == 0
    log = bot.log.decode(errors="replace")
    assert "Task exception was never retrieved" not in log
    assert "Traceback" not in log
    assert len(failure_lines(log, "setMyCommands")) == 1, log
    for method in PER_TURN:  # once per kind: the repeats of a kind are not logged again
        assert len(failure_lines(log, method)) == 2, (method, log)


async def test_per_turn_comforts_failing_leave_no_orphaned_task_and_the_answer_goes_out(
    telegram: StubTelegram, stub_llm: StubOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """The in-process bot (harness): "typing…" and drafts answered with an HTML 500 (ClientDecodeError),
    getUpdates answering at once."""
    telegram.broken = {"sendChatAction": "html_500", "sendMessageDraft": "html_500"}
    telegram.instant_get_updates = True
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, None))
    try:
        for n in range(2):
            telegram.send_text(63, f"question {n}")
            answer = (await telegram.wait_messages(63, n + 1, within=30))[-1]
            assert answer.startswith(f"Support answer to: question {n}"), answer
        assert telegram.of("sendMessageDraft", 63) and telegram.of("sendChatAction", 63)
        before, window = len(telegram.polls), 1.0  # a measurement window (see above)
        await asyncio.sleep(window)
        assert (len(telegram.polls) - before) / window < 3
    finally:
        await bot.stop()
    gc.collect()  # an orphaned task's exception is reported when the task is collected
    logged = [r.getMessage() for r in caplog.records]
    assert not [line for line in logged if "never retrieved" in line]
    assert len([line for line in logged if "optional Bot API call sendChatAction failed (" in line]) == 1
