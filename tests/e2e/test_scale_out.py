"""Several worker processes on one real redis-server, then on a real 3-master Redis Cluster (and, for the
webhook, on one redis-server with WEBHOOK_SERVE_RECEIVED); one is SIGKILLed mid-run. Nothing is lost,
doubled or reordered."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis
from services.backends.redis.store import RedisSessionStore
from tests.conftest import free_port
from tests.e2e.conftest import SharedRedis
from tests.e2e.harness import TOKEN
from tests.e2e.processes import SECRET, BotProcess, base_env
from tests.e2e.scenario import WebhookSender, check, customer_text, random_chats, wait_all_answered
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

POLLER_KEY = KeySpace("sb", TOKEN.split(":")[0]).poller_leader
CHATS = 50
MESSAGES = 4
WORKER_ENV = {
    "WORKER_LEASE_SECONDS": "2",
    "WORKER_IDLE_WAIT_SECONDS": "0.2",
    "LOG_LEVEL": "WARNING",
    "DRAFT_INTERVAL_SECONDS": "0.2",
}


@pytest.mark.parametrize(
    ("shared_redis", "serve_received"),
    [
        pytest.param("single", False, id="single"),
        pytest.param("cluster", False, id="cluster"),
        # the workers serve the chats they receive (WEBHOOK_SERVE_RECEIVED): single server only, for time
        pytest.param("single", True, id="single-serve-received"),
    ],
    indirect=["shared_redis"],
)
async def test_webhook_workers_survive_a_sigkill(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    shared_redis: SharedRedis,
    serve_received: bool,
    tmp_path: Path,
    processes: list[BotProcess],
    shown: Callable[[str], None],
) -> None:
    stub_llm.latency = 0.05
    real_redis = shared_redis.client
    env = (
        base_env(telegram, stub_llm)
        | WORKER_ENV
        | {
            "BOT_MODE": "webhook",
            "WEBHOOK_HOST": "127.0.0.1",
            "WEBHOOK_PORT": "0",
            "WEBHOOK_PATH": "/hook",
            "WEBHOOK_SECRET": SECRET,
            "REDIS_URL": shared_redis.url,
            "WEBHOOK_SERVE_RECEIVED": "true" if serve_received else "false",
        }
    )
    ports = [free_port() for _ in range(3)]
    for port in ports:
        process = BotProcess(env | {"WEBHOOK_PORT": str(port)}, tmp_path)
        processes.append(process)
        await process.start()
    sender = WebhookSender(telegram, [f"http://127.0.0.1:{p}/hook" for p in ports], SECRET)
    for process, port in zip(processes, ports, strict=True):
        await process.wait_http_ok(f"http://127.0.0.1:{port}/healthz")
    chats = random_chats(CHATS)
    if serve_received:
        await real_redis.config_resetstat()  # (single server) wake-ups are counted from here on
    started = time.monotonic()

    victim = processes[0]
    assert victim.process is not None
    held_by_victim: list[bytes] = []

    async def kill_one() -> None:
        # kill the worker while it holds chats in progress
        assert victim.process is not None
        deadline = time.monotonic() + 20
        while not held_by_victim and time.monotonic() < deadline:
            async for key in real_redis.scan_iter(match=KeySpace("sb", "123456").chat_pattern("lease")):
                holder = await real_redis.get(key)
                if holder and f":{victim.process.pid}:" in holder.decode():
                    held_by_victim.append(key)
            await asyncio.sleep(0.01)
        victim.process.send_signal(signal.SIGKILL)
        sender.dead.add(0)

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(kill_one(), *(sender.send_chat(http, chat, MESSAGES) for chat in chats))
    await wait_all_answered(telegram, chats, MESSAGES, within=60)
    report = await check(
        telegram, RedisSessionStore(redis=real_redis, keys=KeySpace("sb", "123456")), chats, MESSAGES, started
    )
    variant, wake_ups = shared_redis.mode, 0
    if serve_received:
        # every update queued leaves a wake-up (an LPUSH, in a script); one whose chat the receiving
        # worker took at intake does not
        wake_ups = (await real_redis.info("commandstats")).get("cmdstat_lpush", {}).get("calls", 0)
        variant += f", serve received, wake_ups={wake_ups}"
    shown(  # the counts are part of what this test shows, pass or fail
        f"\nwebhook scale-out ({variant}): {report.line()} intake_retries={sender.retries} "
        f"chats_in_progress_at_kill={len(held_by_victim)}"
    )
    assert held_by_victim, "the victim was killed while serving chats"
    assert processes[0].process is not None and processes[0].process.returncode == -signal.SIGKILL
    assert report.answered == report.sent == CHATS * MESSAGES
    assert report.lost == 0 and report.doubled == 0 and report.out_of_order == 0
    assert report.stored_turns == CHATS * MESSAGES
    if serve_received:
        assert wake_ups < report.sent, "the setting reached the workers: some chats were served at intake"


async def test_polling_leader_killed(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    shared_redis: SharedRedis,
    tmp_path: Path,
    processes: list[BotProcess],
    shown: Callable[[str], None],
) -> None:
    stub_llm.latency = 0.05
    real_redis = shared_redis.client
    env = (
        base_env(telegram, stub_llm)
        | WORKER_ENV
        | {
            "BOT_MODE": "polling",
            "REDIS_URL": shared_redis.url,
            "POLLING_TIMEOUT_SECONDS": "1",
        }
    )
    for _ in range(3):
        process = BotProcess(env, tmp_path)
        processes.append(process)
        await process.start()
    leader_pid = await _leader_pid(real_redis)
    chats = random_chats(CHATS, seed=11)
    started = time.monotonic()
    for n in range(MESSAGES):
        for chat in chats:
            telegram.send_text(chat, customer_text(chat, n))
        if n == 1:
            await asyncio.sleep(0.3)
            leader = next(p for p in processes if p.process is not None and p.process.pid == leader_pid)
            assert leader.process is not None
            leader.process.send_signal(signal.SIGKILL)
        await asyncio.sleep(0.2)
    await wait_all_answered(telegram, chats, MESSAGES, within=60)
    new_leader = await _leader_pid(real_redis)
    report = await check(
        telegram, RedisSessionStore(redis=real_redis, keys=KeySpace("sb", "123456")), chats, MESSAGES, started
    )
    shown(f"\npolling scale-out ({shared_redis.mode}): {report.line()} getUpdates_conflicts={telegram.conflicts}")
    assert new_leader != leader_pid
    assert report.answered == report.sent and report.lost == 0 and report.doubled == 0
    assert report.out_of_order == 0 and report.stored_turns == CHATS * MESSAGES
    assert telegram.conflicts <= 5, "no 409 loops"


async def _leader_pid(redis: AnyRedis, within: float = 90) -> int:
    # three Python processes starting at once take ~30s to elect a leader on a loaded 2-core machine
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        holder = await redis.get(POLLER_KEY)
        if holder:
            return int(holder.decode().split(":")[1])
        await asyncio.sleep(0.05)
    raise AssertionError("no poller leader elected")
