"""Model-provider outages as a customer and an operator see them: real ``python -m bot`` processes (the
queued mode on a real redis-server, and the in-process mode), the stub Bot API and the stub model with
a persistent 429/503, a Retry-After, and a key revoked mid-run (401). A customer told "saved, I will
answer" gets the answer or a final message; an operator sees an ERROR line, a metric and /readyz."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio import Redis

from bot.telegram.texts import TEXTS
from services.backends.redis.keys import KeySpace
from tests.conftest import RedisServer, free_port
from tests.e2e.processes import API_KEY, BotProcess, base_env
from tests.e2e.test_handoff import GROUP
from tests.e2e.waiting import eventually
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

KEYS = KeySpace("sb", "123456")
EN = TEXTS["en"]


def queued_env(telegram: StubTelegram, stub_llm: StubOpenAI, redis_url: str, **extra: str) -> dict[str, str]:
    return (
        base_env(telegram, stub_llm)
        | {
            "BOT_MODE": "polling",
            "REDIS_URL": redis_url,
            "POLLING_TIMEOUT_SECONDS": "1",
            "WORKER_LEASE_SECONDS": "2",
            "WORKER_IDLE_WAIT_SECONDS": "0.2",
            "LOG_LEVEL": "WARNING",
        }
        | extra
    )


async def started(env: dict[str, str], tmp_path: Path, processes: list[BotProcess]) -> tuple[BotProcess, str]:
    """A bot process with its ops server on a free port; returns it and the ops server's URL."""
    port = free_port()
    process = BotProcess(env | {"METRICS_PORT": str(port)}, tmp_path)
    processes.append(process)
    await process.start()
    ops = f"http://127.0.0.1:{port}"
    await process.wait_http_ok(f"{ops}/healthz")
    return process, ops


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


async def readyz(ops: str) -> dict[str, Any]:
    _status, body = await get(f"{ops}/readyz")
    return dict(json.loads(body))


async def metric(ops: str, line_start: str) -> float | None:
    _status, body = await get(f"{ops}/metrics")
    for line in body.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_questions_given_up_after_a_long_429_get_a_final_message_and_no_chat_is_silent(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """10 chats at once against a model that answers 429 past the give-up time: each chat hears the
    promise, then exactly one final message; each question is a dead letter."""
    stub_llm.fail_with = 429
    env = queued_env(telegram, stub_llm, redis_server.url, WORKER_GIVE_UP_SECONDS="1", WORKER_CONCURRENCY="16")
    await started(env, tmp_path, processes)
    chats = [880100 + n for n in range(10)]
    for chat in chats:
        telegram.send_text(chat, f"question of {chat}")
    for chat in chats:
        await telegram.wait_messages(chat, 2, within=20)
    for chat in chats:
        assert telegram.texts_to(chat)[:2] == [EN["llm_retrying"], EN["given_up"]], telegram.texts_to(chat)
    assert await real_redis.zcard(KEYS.dead_index) == len(chats)
    asked = Counter(r["messages"][-1]["content"] for r in stub_llm.chat_requests)
    assert max(asked.values()) <= 10, asked
    await asyncio.sleep(0.5)  # nothing more comes: the final message is sent once
    assert all(len(telegram.texts_to(chat)) == 2 for chat in chats)


async def test_a_given_up_question_reaches_the_operators_with_handoff_on(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    stub_llm.fail_with = 503
    env = queued_env(
        telegram, stub_llm, redis_server.url, WORKER_GIVE_UP_SECONDS="1", OPERATOR_CHAT_ID=str(GROUP),
        HANDOFF_REPLY_TIMEOUT_SECONDS="3600",
    )  # fmt: skip
    await started(env, tmp_path, processes)
    chat = 880200
    telegram.send_text(chat, "where is my order 4711?")
    await telegram.wait_for(lambda: EN["handoff_started"] in telegram.texts_to(chat), within=20)
    assert telegram.texts_to(chat)[:2] == [EN["llm_retrying"], EN["given_up_handoff"]]
    in_forum = [c.params.get("text", "") for c in telegram.of("sendMessage", GROUP)]
    assert any("where is my order 4711?" in text for text in in_forum), in_forum
    assert await real_redis.zcard(KEYS.dead_index) == 1


async def test_a_key_revoked_mid_run_is_an_operator_visible_outage_then_answered_once_fixed(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    stub_llm.api_key = API_KEY
    env = queued_env(telegram, stub_llm, redis_server.url, WORKER_GIVE_UP_SECONDS="60")
    process, ops = await started(env, tmp_path, processes)
    chat = 880300
    telegram.send_text(chat, "first question")
    await telegram.wait_messages(chat, 1, within=20)
    stub_llm.api_key = "sk-rotated-key"  # the operator rotated the key; the bot still has the old one
    telegram.send_text(chat, "second question")
    await telegram.wait_messages(chat, 2, within=20)
    assert telegram.texts_to(chat)[1] == EN["llm_retrying"]  # temporarily unavailable, kept: not "rephrase"
    await process.wait_log("OPENAI_API_KEY", within=10)
    log = process.log.decode(errors="replace")
    assert any("ERROR" in line and "HTTP 401" in line for line in log.splitlines()), log
    assert await metric(ops, 'sb_llm_provider_refusing{call="chat"}') == 1.0
    assert await metric(ops, 'sb_llm_provider_refusals_total{call="chat",status="401"}') is not None
    state = await readyz(ops)
    assert state["status"] == "degraded" and state["checks"]["model_provider"] is False, state
    stub_llm.api_key = API_KEY  # fixed: the question that waited is answered
    await telegram.wait_for(lambda: "Support answer to: second question" in telegram.texts_to(chat), within=20)

    async def cleared() -> bool:
        return await metric(ops, 'sb_llm_provider_refusing{call="chat"}') == 0.0

    await eventually(cleared, within=30, what="the refusing gauge to clear")
    assert (await readyz(ops))["checks"]["model_provider"] is True
    assert await real_redis.zcard(KEYS.dead_index) == 0


async def test_retry_after_is_honoured_across_queued_attempts(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    arrivals: list[float] = []
    stub_llm.on_handled = lambda _body, _seconds: arrivals.append(time.monotonic())
    stub_llm.chat_replies.append(429)
    stub_llm.error_headers = {"retry-after": "2"}
    await started(queued_env(telegram, stub_llm, redis_server.url), tmp_path, processes)
    chat = 880400
    telegram.send_text(chat, "hello")
    await telegram.wait_for(lambda: "Support answer to: hello" in telegram.texts_to(chat), within=20)
    assert len(arrivals) == 2 and arrivals[1] - arrivals[0] >= 1.9, arrivals


async def test_in_process_mode_a_refused_key_says_temporarily_unavailable_and_degrades_readyz(
    telegram: StubTelegram, stub_llm: StubOpenAI, tmp_path: Path, processes: list[BotProcess]
) -> None:
    """... and once the key is fixed /readyz recovers with no one writing (the probe)."""
    stub_llm.api_key = API_KEY
    env = base_env(telegram, stub_llm) | {"BOT_MODE": "polling", "POLLING_TIMEOUT_SECONDS": "1"}
    process, ops = await started(env | {"LLM_PROBE_INTERVAL_SECONDS": "0.2"}, tmp_path, processes)
    await _recovers_without_traffic(telegram, stub_llm, ops, 880500, EN["llm_unavailable"])
    assert telegram.texts_to(880500) == [EN["llm_unavailable"]]
    await process.wait_log("OPENAI_API_KEY", within=30)


async def _recovers_without_traffic(
    telegram: StubTelegram, stub_llm: StubOpenAI, ops: str, chat: int, told: str
) -> None:
    """The key is rotated, a question is refused (the customer hears ``told``), the key is fixed and no
    one writes: the probe clears the gauge and /readyz."""
    stub_llm.api_key = "sk-rotated-key"
    telegram.send_text(chat, "hello")
    await telegram.wait_for(lambda: told in telegram.texts_to(chat), within=20)
    state = await readyz(ops)
    assert state["status"] == "degraded" and state["checks"]["model_provider"] is False, state
    stub_llm.api_key = API_KEY

    async def ready() -> bool:
        return (await readyz(ops))["checks"]["model_provider"] is True

    await eventually(ready, within=30, what="/readyz's model_provider check to recover")
    assert await metric(ops, 'sb_llm_provider_refusing{call="chat"}') == 0.0


async def test_queued_mode_recovers_from_a_refusal_without_traffic(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """The question is given up before the key is fixed, so only the probe can clear the watch."""
    stub_llm.api_key = API_KEY
    env = queued_env(
        telegram, stub_llm, redis_server.url, WORKER_GIVE_UP_SECONDS="0.5", LLM_PROBE_INTERVAL_SECONDS="0.2"
    )
    _process, ops = await started(env, tmp_path, processes)
    await _recovers_without_traffic(telegram, stub_llm, ops, 880700, EN["given_up"])
    assert await real_redis.zcard(KEYS.dead_index) == 1
