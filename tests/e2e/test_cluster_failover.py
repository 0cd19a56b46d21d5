"""A Redis Cluster master killed (SIGKILL) in the middle of a run and started again on the same port and
``nodes.conf``: without replicas the whole cluster reports CLUSTERDOWN until it returns. Webhook intake
answers 503 meanwhile (Telegram retries), workers back off; afterwards nothing is lost, doubled or
reordered."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from services.backends.redis.connection import redis_client
from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis
from services.backends.redis.store import RedisSessionStore
from tests.cluster import RedisClusterServers
from tests.e2e.processes import SECRET, BotProcess, base_env, start_webhook_workers
from tests.e2e.scenario import WebhookSender, answered, check, expected_reply, random_chats, wait_all_answered
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

KEYS = KeySpace("sb", "123456")
CHATS = 30
MESSAGES = 4


@pytest.fixture
def own_cluster() -> Iterator[RedisClusterServers]:
    """A cluster of its own: this test breaks it on purpose."""
    cluster = RedisClusterServers()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


async def test_a_master_restart_mid_run_loses_nothing(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    own_cluster: RedisClusterServers,
    tmp_path: Path,
    processes: list[BotProcess],
    shown: Callable[[str], None],
) -> None:
    stub_llm.latency = 0.05
    env = base_env(telegram, stub_llm) | {
        "BOT_MODE": "webhook",
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_PATH": "/hook",
        "WEBHOOK_SECRET": SECRET,
        "REDIS_URL": own_cluster.url,
        "REDIS_CLUSTER": "on",
        "WORKER_LEASE_SECONDS": "2",
        "WORKER_IDLE_WAIT_SECONDS": "0.2",
        "LOG_LEVEL": "WARNING",
        "DRAFTS_ENABLED": "false",
    }
    urls = await start_webhook_workers(env, tmp_path, processes, 2)
    sender = WebhookSender(telegram, urls, SECRET)
    chats = random_chats(CHATS, seed=23)
    # the master of the ready set: while it is down no chat can even be claimed
    victim = own_cluster.node_for(KEYS.ready)
    outage: dict[str, float] = {}

    killed = asyncio.Event()

    async def restart_a_master() -> None:
        down_at = time.monotonic()
        victim.kill()
        killed.set()
        outage["answered_before"] = answered(telegram, chats, MESSAGES)
        # past the node timeout the other masters mark it failed and refuse every slot (CLUSTERDOWN)
        while "fail" not in await asyncio.to_thread(own_cluster.state_seen_by_others, victim):
            assert time.monotonic() - down_at < 30, "the cluster never noticed the dead master"
            await asyncio.sleep(0.1)
        outage["fail_seen_after"] = time.monotonic() - down_at
        await asyncio.sleep(1.0)  # some more intake and work against a cluster that is down
        await asyncio.to_thread(victim.start)
        await asyncio.to_thread(own_cluster.wait_ok)
        outage["down_seconds"] = time.monotonic() - down_at

    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        # two messages per chat, then the master dies while they are processed and the rest arrive
        for n in range(2):
            await asyncio.gather(*(sender.send_chat_message(http, chat, n) for chat in chats))
        restart = asyncio.create_task(restart_a_master())
        await killed.wait()
        for n in range(2, MESSAGES):
            await asyncio.gather(*(sender.send_chat_message(http, chat, n) for chat in chats))
        await restart
    client = redis_client(own_cluster.url, cluster=True)
    try:
        await wait_all_answered(telegram, chats, MESSAGES, within=90)
    except AssertionError:
        tails = [
            f"--- worker {i} log tail ---\n{w.log.decode(errors='replace')[-4000:]}" for i, w in enumerate(processes)
        ]
        shown(
            f"\noutage: {outage}\n{await _unanswered_state(client, telegram, chats)}\n"
            f"dead letters: {await client.hgetall(KEYS.dead_items)}\n" + "\n".join(tails)
        )
        raise
    report = await check(telegram, RedisSessionStore(redis=client, keys=KEYS), chats, MESSAGES, started)
    await client.aclose()
    shown(
        f"\ncluster master restart: {report.line()} intake_retries={sender.retries} "
        f"answered_before_kill={outage['answered_before']:.0f} "
        f"cluster_fail_after={outage['fail_seen_after']:.1f}s master_down={outage['down_seconds']:.1f}s"
    )
    assert outage["answered_before"] < CHATS * MESSAGES, "the master died in the middle of the run"
    assert sender.retries > 0, "intake refused updates while the cluster was down"
    assert report.answered == report.sent == CHATS * MESSAGES
    assert report.lost == 0 and report.doubled == 0 and report.out_of_order == 0
    assert report.stored_turns == CHATS * MESSAGES
    for worker in processes:
        assert worker.process is not None and worker.process.returncode is None, "no worker died of it"


async def _unanswered_state(client: AnyRedis, telegram: StubTelegram, chats: list[int]) -> str:
    """Where each chat with an unanswered message stands in Redis (for the failure message)."""
    replies = {str(c.params.get("text")) for c in telegram.of("sendMessage")}
    lines = []
    for chat in chats:
        missing = [n for n in range(MESSAGES) if expected_reply(chat, n) not in replies]
        if missing:
            keys = KEYS.chat(chat)
            lines.append(
                f"chat {chat} missing {missing}: inbox={await client.zrange(keys.inbox, 0, -1, withscores=True)} "
                f"lease={await client.get(keys.lease)} ready={await client.zscore(KEYS.ready, str(chat))} "
                f"seen={await client.zrange(keys.seen, 0, -1)} attempts={await client.hgetall(keys.attempts)} "
                f"now={await client.time()}"
            )
    return "\n".join(lines)
