"""Operating the bot: metrics and health over HTTP, logs without secrets or message text, /forget,
retention, access control."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from bot.telegram.texts import TEXTS
from tests.conftest import RedisServer, free_port
from tests.e2e.harness import TOKEN, make_settings, start_bot
from tests.e2e.processes import API_KEY, BotProcess, base_env
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

SECRET_TEXT = "my secret question about order 5512"


async def chat_keys(redis: Redis, chat_id: int) -> list[bytes]:
    return [key async for key in redis.scan_iter(match=f"*{{chat:{chat_id}}}*")]


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


async def test_metrics_health_and_clean_json_logs(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    port = free_port()
    env = base_env(telegram, stub_llm) | {
        "REDIS_URL": redis_server.url,
        "METRICS_PORT": str(port),
        "METRICS_HOST": "127.0.0.1",
        "LOG_LEVEL": "INFO",
        "LOG_FORMAT": "json",
        "POLLING_TIMEOUT_SECONDS": "1",
    }
    worker = BotProcess(env, tmp_path)
    processes.append(worker)
    await worker.start()
    await worker.wait_http_ok(f"http://127.0.0.1:{port}/healthz")
    telegram.send_text(61, SECRET_TEXT)
    await telegram.wait_messages(61, 1, within=20)
    status, ready = await get(f"http://127.0.0.1:{port}/readyz")
    assert status == 200 and json.loads(ready)["checks"] == {
        "worker": True,
        "gauges": True,
        "provider-probe": True,
        "feedback": True,
        "poller": True,
        "redis": True,
        "model_provider": True,
    }
    await asyncio.sleep(0.3)
    status, metrics = await get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    for line in (
        'sb_turns_total{outcome="ok"} 1.0',
        'sb_llm_call_seconds_count{call="chat"} 1.0',
        "sb_prompt_tokens_estimated_total",
        'sb_prompt_tokens_actual_total{call="chat"}',
        "sb_queue_wait_seconds_count 1.0",
        "sb_queue_due_chats",
        "sb_prompt_token_drift_ratio_count 1.0",
        'sb_prompt_tokens_cached_total{call="chat"} 0.0',
    ):
        assert line in metrics, line
    assert await worker.stop() == 0
    log = worker.log.decode()
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]
    turn = [entry for entry in lines if entry["message"].startswith("turn chat=61 ")]
    assert len(turn) == 1 and "est_tokens=" in turn[0]["message"] and turn[0]["level"] == "INFO"
    assert "cached_tokens=0 " in turn[0]["message"]
    for secret in (TOKEN, TOKEN.split(":")[1], API_KEY, SECRET_TEXT, "5512"):
        assert secret not in log, secret


@pytest.mark.redis
async def test_readyz_reports_redis_down(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    redis = RedisServer()
    redis.start()
    port = free_port()
    env = base_env(telegram, stub_llm) | {
        "REDIS_URL": redis.url,
        "METRICS_PORT": str(port),
        "METRICS_HOST": "127.0.0.1",
    }
    worker = BotProcess(env, tmp_path)
    processes.append(worker)
    try:
        await worker.start()
        await worker.wait_http_ok(f"http://127.0.0.1:{port}/readyz")
        redis.stop()
        status, body = await get(f"http://127.0.0.1:{port}/readyz")
        assert status == 503 and json.loads(body)["checks"]["redis"] is False
        assert (await get(f"http://127.0.0.1:{port}/healthz"))[0] == 200
    finally:
        redis.stop()


KEPT_BY_FORGET = {"meta", "seen", "rate"}


async def every_value(redis: Redis, key: bytes) -> bytes:
    """Every byte stored under ``key`` (members, fields and values), whatever its type."""
    kind = (await redis.type(key)).decode()
    if kind == "string":
        return bytes(await redis.get(key) or b"")
    if kind == "hash":
        return b"".join(k + v for k, v in (await redis.hgetall(key)).items())
    if kind == "list":
        return b"".join(await redis.lrange(key, 0, -1))
    if kind == "zset":
        return b"".join(await redis.zrange(key, 0, -1))
    return b"".join(await redis.smembers(key))


async def test_forget_leaves_no_key_and_ttl_expires_everything(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    env = base_env(telegram, stub_llm) | {
        "REDIS_URL": redis_server.url,
        "POLLING_TIMEOUT_SECONDS": "1",
        "SESSION_TTL_SECONDS": "3",
    }
    worker = BotProcess(env, tmp_path)
    processes.append(worker)
    await worker.start()
    await worker.wait_log("poller: took leadership", within=90)  # a slow start is not what is tested
    for text in ("hello", "order 7718 please", "/forget"):
        telegram.send_text(71, text)
    await telegram.wait_messages(71, 3, within=60)
    assert telegram.texts_to(71)[-1] == TEXTS["en"]["forget_done"]
    for _ in range(50):
        if {k.decode().rsplit(":", 1)[1] for k in await chat_keys(real_redis, 71)} <= KEPT_BY_FORGET:
            break
        await asyncio.sleep(0.1)
    # what stays: the version counter (so nothing loaded before /forget can be written back), the ids
    # of recent updates (so a redelivery is not stored again) and the rate-limit window (update ids and
    # times, so /forget is no way around the limit); no byte of the conversation
    left = {k.decode().rsplit(":", 1)[1]: k for k in await chat_keys(real_redis, 71)}
    assert set(left) <= KEPT_BY_FORGET
    assert set(await real_redis.hkeys(left["meta"])) == {b"version"}
    for name in ("seen", "rate"):
        assert all(member.startswith(b"u") for member in await real_redis.zrange(left[name], 0, -1))
    everything = b"".join([await every_value(real_redis, key) async for key in real_redis.scan_iter()])
    assert b"7718" not in everything and b"hello" not in everything
    await asyncio.sleep(3.2)
    assert await chat_keys(real_redis, 71) == [], "what /forget keeps still expires with the session TTL"

    telegram.send_text(72, "remember me for three seconds")
    await telegram.wait_messages(72, 1, within=20)
    for _ in range(50):  # the reply is marked as sent and the chat released just after sending
        names = {k.decode().rsplit(":", 1)[1] for k in await chat_keys(real_redis, 72)}
        if "replied" in names and "lease" not in names:
            break
        await asyncio.sleep(0.05)
    keys = await chat_keys(real_redis, 72)
    assert {k.decode().rsplit(":", 1)[1] for k in keys} >= {"meta", "msgs", "turns", "replied", "seen", "rate"}
    ttls = {key: await real_redis.pttl(key) for key in keys}
    assert all(0 < ttl <= 3000 for ttl in ttls.values()), ttls
    await asyncio.sleep(3.2)
    assert await chat_keys(real_redis, 72) == []


async def test_allowlist_refuses_strangers_and_stores_nothing(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
) -> None:
    settings = make_settings(telegram.base_url, stub_llm.base_url, redis_server.url)
    settings.bot.allowed_user_ids = "81"  # the stub's users have id = chat id + 7
    bot = await start_bot(settings)
    try:
        telegram.send_text(74, "let me in")  # user 81: allowed
        telegram.send_text(75, "let me in too")  # user 82: refused
        await telegram.wait_messages(74, 1)
        texts = await telegram.wait_messages(75, 1)
        assert texts == [TEXTS["en"]["not_allowed"]]
        assert await chat_keys(real_redis, 75) == []
        assert len(stub_llm.chat_requests) == 1
    finally:
        await bot.stop()


async def test_rate_limit_gives_one_notice(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
) -> None:
    settings = make_settings(telegram.base_url, stub_llm.base_url, redis_server.url)
    settings.bot.rate_limit_per_minute = 2
    bot = await start_bot(settings)
    try:
        for n in range(5):
            telegram.send_text(76, f"message {n}")
        await telegram.wait_messages(76, 3)
        await asyncio.sleep(0.5)
        texts = telegram.texts_to(76)
        assert len(texts) == 3 and len(stub_llm.chat_requests) == 2
        assert texts[:2] == ["Support answer to: message 0", "Support answer to: message 1"], "in order"
        assert texts[2].startswith("You are sending messages too fast. Please wait ")
        session = await bot.store.load(76)
        assert len(session.messages) == 4
    finally:
        await bot.stop()
