"""Summaries against model servers that do not do structured output the way OpenAI does (issue 26,
item 6): response_format ignored (JSON wrapped in prose, or prose only), rejected with a 400, or only
json_object. In each, after 30 messages the order number of the first one is still in the prompt's
summary, summary requests stay bounded, and ``sb_summary_calls_total`` counts every one of them. In
process (the in-memory store) and queued (a ``python -m bot`` worker on a real redis-server)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from tests.conftest import RedisServer, free_port
from tests.e2e.harness import make_settings, start_bot
from tests.e2e.processes import BotProcess, base_env
from tests.e2e.summary_talk import MEMORY, MESSAGES, talk
from tests.e2e.waiting import eventually
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

MODES = ["ignore", "prose", "reject", "json_object"]
MOST_SUMMARY_REQUESTS = 20
"""For 30 messages: a server with structured output takes 15 in this conversation, detection adds at
most a rejected call per format; on main these servers took 43 to 85 (every turn tried again)."""


def calls_in_process() -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == "sb_summary_calls_total"
    )


async def done(value: bool) -> bool:
    return value


def calls_scraped(text: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sb_summary_calls_total") and not line.startswith("#")
    )


@pytest.mark.parametrize("mode", MODES)
async def test_in_process_summaries_without_structured_output(
    telegram: StubTelegram, stub_llm: StubOpenAI, mode: str
) -> None:
    stub_llm.summary_format_support = mode
    before, requests_before = calls_in_process(), len(stub_llm.summary_requests)
    bot = await start_bot(
        make_settings(telegram.base_url, stub_llm.base_url, None, bot={"rate_limit_per_minute": 0}, **MEMORY)
    )
    try:
        result = await talk(telegram, stub_llm, 4101)
    finally:
        await bot.stop()
    assert not result.order_verbatim, "the first message must have left the verbatim history"
    assert result.order_in_summary, f"{mode}: the order number was lost from the prompt"
    assert 0 < result.summary_requests <= MOST_SUMMARY_REQUESTS, result
    # after stop: the last turn's proactive compaction may still run when the last answer arrives
    assert calls_in_process() - before == len(stub_llm.summary_requests) - requests_before
    assert result.chat_requests == MESSAGES


@pytest.mark.parametrize("mode", ["prose"])
async def test_queued_summaries_without_structured_output(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
    mode: str,
) -> None:
    """``real_redis``: the database flushed first."""
    stub_llm.summary_format_support = mode
    port = free_port()
    env = base_env(telegram, stub_llm) | {
        "BOT_MODE": "polling",
        "REDIS_URL": redis_server.url,
        "POLLING_TIMEOUT_SECONDS": "1",
        "WORKER_IDLE_WAIT_SECONDS": "0.05",
        "LOG_LEVEL": "WARNING",
        "METRICS_PORT": str(port),
        "METRICS_HOST": "127.0.0.1",
        "RATE_LIMIT_PER_MINUTE": "0",
        "CHAT_INPUT_TOKEN_BUDGET": str(MEMORY["chat_input_token_budget"]),
        "SUMMARY_MAX_TOKENS": str(MEMORY["summary_max_tokens"]),
    }
    worker = BotProcess(env, tmp_path)
    processes.append(worker)
    await worker.start()
    await worker.wait_http_ok(f"http://127.0.0.1:{port}/healthz", within=60)
    result = await talk(telegram, stub_llm, 4201, within=30)

    async def all_counted() -> bool:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
            return calls_scraped(await response.text()) == len(stub_llm.summary_requests)

    await eventually(all_counted, within=30, what="sb_summary_calls_total to count every summary request")
    await worker.stop()
    assert not result.order_verbatim
    assert result.order_in_summary, f"{mode}: the order number was lost from the prompt"
    assert 0 < len(stub_llm.summary_requests) <= MOST_SUMMARY_REQUESTS, result
