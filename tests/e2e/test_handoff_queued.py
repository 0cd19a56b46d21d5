"""Handoff to an operator in queued mode: three ``python -m bot`` workers (polling) on one real
redis-server, the stub Bot API and the stub model. The whole operator workflow, then handoffs with
messages both ways while a worker serving them is SIGKILLed: nothing lost or reordered, and nothing
doubled but, at most, the one copy the killed worker was making in a chat it held (copied, not yet
recorded: the crash window replies have too)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.telegram.texts import TEXTS
from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis
from services.core.handoff_records import TranscriptEntry
from tests.conftest import RedisServer
from tests.e2e.conftest import SharedRedis
from tests.e2e.processes import BotProcess, base_env
from tests.e2e.test_handoff import DECISION, GROUP, SEED, operator_aware_summary
from tests.e2e.waiting import eventually
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

KEYS = KeySpace("sb", "123456")
CHAT = 777001
CHATS = [777100 + n for n in range(8)]
ROUNDS = 6


async def start_workers(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_url: str, tmp_path: Path, processes: list[BotProcess]
) -> None:
    env = base_env(telegram, stub_llm) | {
        "BOT_MODE": "polling",
        "REDIS_URL": redis_url,
        "POLLING_TIMEOUT_SECONDS": "1",
        "WORKER_LEASE_SECONDS": "2",
        "WORKER_IDLE_WAIT_SECONDS": "0.2",
        "LOG_LEVEL": "WARNING",
        "OPERATOR_CHAT_ID": str(GROUP),
        "HANDOFF_REPLY_TIMEOUT_SECONDS": "3600",
    }
    for _ in range(3):
        process = BotProcess(env, tmp_path)
        processes.append(process)
        await process.start()


def topic_of(telegram: StubTelegram, chat_id: int) -> int | None:
    return next((t for t, info in telegram.topics.items() if info["name"].endswith(f"· {chat_id}")), None)


async def whole_workflow_once(telegram: StubTelegram, stub_llm: StubOpenAI) -> None:
    """The whole workflow once, through the queue: ticket, photo, decision, note, close, the summary."""
    for n, line in enumerate(SEED, start=1):
        telegram.send_text(CHAT, line)
        await telegram.wait_messages(CHAT, n, within=120)
    telegram.send_text(CHAT, "/operator")
    await telegram.wait_for(lambda: TEXTS["en"]["handoff_started"] in telegram.texts_to(CHAT), within=30)
    thread = topic_of(telegram, CHAT)
    assert thread is not None
    ticket = "\n".join(c.params["text"] for c in telegram.in_topic(thread, "sendMessage"))
    assert all(f in ticket for f in ("7718", "monitor stand is cracked", "box was intact", "photo of the crack"))
    calls = len(stub_llm.chat_requests)
    telegram.push(telegram.photo_update(CHAT, caption="the crack"))
    telegram.send_text(CHAT, "Can I get a replacement?")
    telegram.push(telegram.operator_update(GROUP, thread, DECISION))
    telegram.push(telegram.operator_update(GROUP, thread, "/note VIP customer"))
    telegram.push(telegram.operator_update(GROUP, thread, "/close"))
    await telegram.wait_for(lambda: TEXTS["en"]["handoff_closed"] in telegram.texts_to(CHAT), within=30)
    assert len(telegram.in_topic(thread, "copyMessage")) == 2 and len(telegram.of("copyMessage", CHAT)) == 1
    telegram.send_text(CHAT, "When does the courier come?")
    await telegram.wait_for(lambda: len(stub_llm.chat_requests) == calls + 1, within=30)
    summary = next(
        m["content"] for m in stub_llm.chat_requests[-1]["messages"] if "<conversation_summary>" in m["content"][:30]
    )
    assert "replacement stand" in summary and "Friday" in summary
    assert not any("VIP" in str(r["messages"]) for r in stub_llm.requests)


async def open_handoffs(telegram: StubTelegram) -> dict[int, int | None]:
    """A handoff in each of CHATS; their topics."""
    for chat in CHATS:
        telegram.send_text(chat, "/operator")
    await telegram.wait_for(lambda: all(topic_of(telegram, c) is not None for c in CHATS), within=60)
    await telegram.wait_for(
        lambda: all(TEXTS["en"]["handoff_started"] in telegram.texts_to(c) for c in CHATS), within=60
    )
    return {chat: topic_of(telegram, chat) for chat in CHATS}


class Relay:
    """Messages both ways in every chat's handoff, one worker killed while it serves them."""

    def __init__(self, telegram: StubTelegram, real_redis: AnyRedis, processes: list[BotProcess]) -> None:
        self.telegram = telegram
        self.real_redis = real_redis
        self.processes = processes
        self.customer_ids: dict[int, list[int]] = {c: [] for c in CHATS}
        self.operator_ids: dict[int, list[int]] = {c: [] for c in CHATS}
        self.killed: list[int] = []
        self.held_at_kill: set[int] = set()

    async def kill_one_serving_a_handoff(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for chat in CHATS:
                if await self._kill_the_holder_of(chat):
                    return
            await asyncio.sleep(0.005)

    async def _kill_the_holder_of(self, chat: int) -> bool:
        holder = await self.real_redis.get(KEYS.chat(chat).lease)
        if holder is None:
            return False
        victim = next((p for p in self.processes if p.process and f":{p.process.pid}:" in holder.decode()), None)
        if victim is None or victim.process is None:
            return False
        victim.process.send_signal(signal.SIGKILL)
        await victim.process.wait()
        self.killed.append(chat)
        mark = f":{victim.process.pid}:".encode()
        for other in CHATS:  # a dead worker's leases stay until they expire
            if mark in (await self.real_redis.get(KEYS.chat(other).lease) or b""):
                self.held_at_kill.add(other)
        return True

    async def rounds(self, topics: dict[int, int | None]) -> None:
        """ROUNDS messages each way in every chat; the kill starts after the second round."""
        killer: asyncio.Task[None] | None = None
        for n in range(ROUNDS):
            for chat in CHATS:
                sent = self.telegram.send_text(chat, f"customer {chat} #{n}")
                self.customer_ids[chat].append(sent["message"]["message_id"])
                update = self.telegram.push(self.telegram.operator_update(GROUP, topics[chat], f"operator {chat} #{n}"))
                self.operator_ids[chat].append(update["message"]["message_id"])
            if n == 1:
                killer = asyncio.create_task(self.kill_one_serving_a_handoff())
            await asyncio.sleep(0.1)
        assert killer is not None
        await killer


def copied_to_topic(telegram: StubTelegram, topics: dict[int, int | None], chat: int) -> list[int]:
    return [int(c.params["message_id"]) for c in telegram.in_topic(topics[chat] or 0, "copyMessage")]


def copied_to_customer(telegram: StubTelegram, chat: int) -> list[int]:
    return [int(c.params["message_id"]) for c in telegram.of("copyMessage", chat)]


async def check_transcript(real_redis: AnyRedis, processes: list[BotProcess], chat: int) -> None:
    """Every message in the transcript once; a worker records a copy after Telegram answered it, so
    the last ones may still be on their way when the copies are all seen."""
    expected = sorted(
        [f"customer {chat} #{n}" for n in range(ROUNDS)] + [f"operator {chat} #{n}" for n in range(ROUNDS)]
    )
    log_key = KEYS.chat(chat).handoff_log

    async def complete(key: str = log_key, count: int = len(expected)) -> bool:
        return await real_redis.llen(key) >= count

    with contextlib.suppress(AssertionError):  # what is there after 30 s is compared below
        await eventually(complete, within=30, what=f"chat {chat}'s transcript")
    raw = await real_redis.lrange(log_key, 0, -1)
    transcript = sorted(TranscriptEntry.from_json(entry).text for entry in raw)
    if transcript != expected:
        logs = "".join(p.log.decode(errors="replace") for p in processes)
        pytest.fail(f"chat {chat}: transcript {transcript}, expected every message once; logs:\n{logs}")


async def test_queued_workers_relay_in_order_exactly_once_through_a_sigkill(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    shared_redis: SharedRedis,
    tmp_path: Path,
    processes: list[BotProcess],
    shown: Callable[[str], None],
) -> None:
    """On one redis-server and on a 3-master Redis Cluster (the global handoff keys live in another
    slot than the chats' keys)."""
    stub_llm.summary_reply = operator_aware_summary
    real_redis = shared_redis.client
    await start_workers(telegram, stub_llm, shared_redis.url, tmp_path, processes)
    await whole_workflow_once(telegram, stub_llm)

    # many handoffs at once, both directions, one worker killed while serving them
    topics = await open_handoffs(telegram)
    relay = Relay(telegram, real_redis, processes)
    await relay.rounds(topics)
    customer_ids, operator_ids, held_at_kill = relay.customer_ids, relay.operator_ids, relay.held_at_kill
    await telegram.wait_for(
        lambda: all(
            set(customer_ids[c]) <= set(copied_to_topic(telegram, topics, c))
            and set(operator_ids[c]) <= set(copied_to_customer(telegram, c))
            for c in CHATS
        ),
        within=90,
    )
    doubled: dict[int, int] = {}
    for chat in CHATS:
        for copies in (copied_to_topic(telegram, topics, chat), copied_to_customer(telegram, chat)):
            doubled[chat] = doubled.get(chat, 0) + len(copies) - len(set(copies))
    shown(
        f"\nhandoff relay ({shared_redis.mode}), 3 workers, one SIGKILLed: chats={len(CHATS)} rounds={ROUNDS} "
        f"held_by_the_killed_worker={len(held_at_kill)} doubled={sum(doubled.values())}"
    )
    assert relay.killed, "a worker was killed while it held a handoff chat"
    for chat in CHATS:
        # nothing lost, nothing reordered; the only copy that can come twice is the one a worker was
        # making when it was killed (copied, not yet recorded): at most one per chat it held
        assert collapse_repeats(copied_to_topic(telegram, topics, chat)) == customer_ids[chat], (
            f"chat {chat}: customer → topic"
        )
        assert collapse_repeats(copied_to_customer(telegram, chat)) == operator_ids[chat], (
            f"chat {chat}: topic → customer"
        )
        assert doubled[chat] <= (1 if chat in held_at_kill else 0), (chat, doubled[chat], held_at_kill)
        if doubled[chat]:  # and it is known: the next worker saw the copy begun and not recorded
            logs = "".join(p.log.decode(errors="replace") for p in processes)
            assert f"chat {chat}: u" in logs and "attempt that died; copying it again" in logs
        await check_transcript(real_redis, processes, chat)


def collapse_repeats(ids: list[int]) -> list[int]:
    """``ids`` with a value repeated right after itself counted once (a redelivered copy comes next)."""
    return [value for index, value in enumerate(ids) if index == 0 or ids[index - 1] != value]


async def metric(port: int, line_start: str) -> float | None:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
        body = await response.text()
    for line in body.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_queued_overdue_handoff_and_metrics(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """The reply deadline is found by the worker's watcher and handled as an internal queue item under
    the chat's lease; the handoff metrics are served on /metrics."""
    from tests.conftest import free_port

    port = free_port()
    env = base_env(telegram, stub_llm) | {
        "REDIS_URL": redis_server.url,
        "POLLING_TIMEOUT_SECONDS": "1",
        "WORKER_LEASE_SECONDS": "2",
        "WORKER_IDLE_WAIT_SECONDS": "0.2",
        "OPERATOR_CHAT_ID": str(GROUP),
        "HANDOFF_REPLY_TIMEOUT_SECONDS": "1",
        "METRICS_PORT": str(port),
        "METRICS_HOST": "127.0.0.1",
    }
    worker = BotProcess(env, tmp_path)
    processes.append(worker)
    await worker.start()
    await worker.wait_http_ok(f"http://127.0.0.1:{port}/readyz")
    telegram.send_text(CHAT, "/operator", language="ru")
    await telegram.wait_for(lambda: TEXTS["ru"]["handoff_slow"] in telegram.texts_to(CHAT), within=30)
    thread = topic_of(telegram, CHAT)
    assert thread is not None
    assert telegram.in_topic(thread, "sendMessage")[-1].params["text"] == TEXTS["en"]["op_overdue"].format(minutes=0)

    async def flagged() -> bool:  # the flag and the deadline's removal come after the notices
        flag = await real_redis.hget(KEYS.chat(CHAT).handoff, "flagged")
        return flag == b"1" and await real_redis.zcard(KEYS.handoff_deadlines) == 0

    await eventually(flagged, within=15, what="the topic flagged and its reply deadline removed")
    assert await metric(port, "sb_handoffs_open") == 1
    telegram.push(telegram.operator_update(GROUP, thread, "Sorry for the wait, looking at it now."))
    telegram.push(telegram.operator_update(GROUP, thread, "/close"))
    await telegram.wait_for(lambda: TEXTS["ru"]["handoff_closed"] in telegram.texts_to(CHAT), within=30)
    assert telegram.texts_to(CHAT).count(TEXTS["ru"]["handoff_slow"]) == 1
    assert await metric(port, 'sb_handoffs_opened_total{trigger="command"}') == 1
    assert await metric(port, 'sb_handoffs_closed_total{by="operator"}') == 1
    assert await metric(port, "sb_handoff_tickets_total") == 1
    assert await metric(port, "sb_handoff_first_reply_seconds_count") == 1
    first_reply = await metric(port, "sb_handoff_first_reply_seconds_sum")
    assert first_reply is not None and first_reply >= 1
    deadline = time.monotonic() + 15
    while await metric(port, "sb_handoffs_open") != 0:  # the gauge is refreshed every 5 s
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)
