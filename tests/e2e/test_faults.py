"""Faults beyond SIGKILL, against real worker processes and a real redis-server: a worker paused past
its lease, a customer's /forget racing it, a Redis that stops answering, undecodable updates, a damaged
session record. Each checks what the customer sees and what Redis keeps."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import time
from collections import deque
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio import Redis
from redis.exceptions import RedisError

from bot.backends import open_redis_backend
from bot.cli import admin
from bot.telegram.texts import TEXTS
from services.backends.redis.backend import RedisBackend
from services.backends.redis.keys import KeySpace
from services.backends.redis.store import RedisSessionStore
from tests.conftest import RedisServer
from tests.e2e.harness import TOKEN, make_settings
from tests.e2e.processes import (
    SECRET,
    BotProcess,
    base_env,
    run_side_by_side,
    start_webhook_worker,
    start_webhook_workers,
)
from tests.e2e.test_operations import every_value
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

KEYS = KeySpace("sb", TOKEN.split(":")[0])
LEASE = 2.0


def worker_env(telegram: StubTelegram, stub_llm: StubOpenAI, redis_url: str, **extra: str) -> dict[str, str]:
    return (
        base_env(telegram, stub_llm)
        | {
            "BOT_MODE": "webhook",
            "WEBHOOK_HOST": "127.0.0.1",
            "WEBHOOK_PATH": "/hook",
            "WEBHOOK_SECRET": SECRET,
            "REDIS_URL": redis_url,
            "WORKER_LEASE_SECONDS": str(LEASE),
            "WORKER_IDLE_WAIT_SECONDS": "0.2",
            "LOG_LEVEL": "WARNING",
        }
        | extra
    )


async def post(url: str, update: dict[str, Any] | bytes) -> int:
    data = update if isinstance(update, bytes) else json.dumps(update).encode()
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http, http.post(url, data=data, headers=headers) as response:
        return response.status


async def wait_until(predicate: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def redis_holds(redis: Redis, needle: bytes) -> bool:
    return any([needle in await every_value(redis, key) async for key in redis.scan_iter()])


async def test_a_worker_paused_past_its_lease_brings_nothing_forgotten_back(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """Worker A is frozen (SIGSTOP) during its model call; B takes the chat over, answers, and processes
    the customer's /forget; then A resumes. Regression: A's commit went through (the version had gone
    back to 0 with the deleted keys), the card number was stored again and A sent a second answer."""
    env = worker_env(telegram, stub_llm, redis_server.url)
    url_a = await start_webhook_worker(env, tmp_path, processes)
    worker_a = processes[0]
    assert worker_a.process is not None
    chat = 501
    stub_llm.delays.append(3 * LEASE)  # A's model call is slow
    assert await post(url_a, telegram.message_update(chat, "my card is 4111 1111 1111 1111")) == 200
    await wait_until(lambda: len(stub_llm.chat_requests) == 1, 20, "A's model call")
    worker_a.process.send_signal(signal.SIGSTOP)
    try:
        url_b = await start_webhook_worker(env, tmp_path, processes)
        await telegram.wait_messages(chat, 1, within=30)  # B took over after the lease and answered
        assert await post(url_b, telegram.message_update(chat, "/forget")) == 200
        await telegram.wait_messages(chat, 2, within=20)
        assert telegram.texts_to(chat)[-1] == TEXTS["en"]["forget_done"]
        await wait_until(lambda: len(stub_llm.chat_requests) == 2, 1, "only B's model call")
    finally:
        worker_a.process.send_signal(signal.SIGCONT)
    # A's model answer arrives after the pause (3 leases after it asked): wait well past that
    await worker_a.wait_log("lease lost", within=3 * LEASE + 10)
    await asyncio.sleep(1.0)
    texts = telegram.texts_to(chat)
    assert len(texts) == 2, f"A answered again after the chat was taken over and forgotten: {texts}"
    assert not await redis_holds(real_redis, b"4111"), "the forgotten card number is back in Redis"
    session = await RedisSessionStore(redis=real_redis, keys=KEYS).load(chat)
    assert session.messages == ()


async def test_redis_stalled_longer_than_the_lease_loses_and_doubles_nothing(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """CLIENT PAUSE freezes Redis for every worker for longer than the lease while turns are in flight:
    the heartbeats cannot renew in time, so the handlers are cancelled before sending; once Redis is
    back, every message is answered, in order, and stored exactly once."""
    env = worker_env(telegram, stub_llm, redis_server.url, DRAFTS_ENABLED="false")
    urls = await start_webhook_workers(env, tmp_path, processes, 2)
    stub_llm.latency = 0.3
    chats = list(range(601, 611))
    for n in range(2):
        for i, chat in enumerate(chats):
            assert await post(urls[i % 2], telegram.message_update(chat, f"c{chat} m{n}")) == 200
    await wait_until(lambda: len(stub_llm.chat_requests) >= 3, 20, "turns in flight")
    await real_redis.execute_command("CLIENT", "PAUSE", int(LEASE * 1000 * 2), "ALL")
    for chat in chats:
        await telegram.wait_messages(chat, 2, within=60)
    await asyncio.sleep(LEASE)  # anything still in flight settles
    store = RedisSessionStore(redis=real_redis, keys=KEYS)
    for chat in chats:
        users = [m.content for m in (await store.load(chat)).messages if m.role == "user"]
        assert users == [f"c{chat} m0", f"c{chat} m1"], f"chat {chat}: {users}"
        answers = [t for t in telegram.texts_to(chat) if t.startswith("Support answer to:")]
        assert sorted(set(answers)) == sorted(f"Support answer to: c{chat} m{n}" for n in range(2))


async def redis_answers_again(url: str, within: float = 60) -> None:
    """Wait until Redis answers (a CLIENT PAUSE is over): each try on a fresh connection."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        client = Redis.from_url(url, socket_timeout=1)
        try:
            await client.ping()
            return
        except RedisError:
            await asyncio.sleep(0.1)
        finally:
            await client.aclose()
    raise AssertionError("Redis did not answer again")


async def test_redis_stalled_between_a_reply_and_its_record_sends_it_once(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """Issue 36: a worker's reply has reached Telegram; Redis then stops answering for four leases before
    it can record it. Nobody else takes the chat meanwhile: the sender has one slot (busy with this turn)
    and the two other workers are held still (SIGSTOP) until the record is in Redis. So the late record
    is accepted and the next holder does not send the reply again (the old rule refused it because the
    sender's lease had run out; a feedback write between the send and the mark lost it too: a duplicate).
    Without the hold, a starved sender could be overtaken by another worker claiming the lapsed chat:
    the duplicate README's Limits allows, not the one this test is about."""
    env = worker_env(telegram, stub_llm, redis_server.url, DRAFTS_ENABLED="false")
    url = await start_webhook_worker(env | {"WORKER_CONCURRENCY": "1"}, tmp_path, processes)
    other_urls = await start_webhook_workers(env, tmp_path, processes, 2)
    others = [worker.process for worker in processes[1:] if worker.process is not None]
    chat = 802
    replied = KEYS.chat(chat).replied
    held = telegram.gates["sendMessage"] = asyncio.Event()
    for other in others:
        other.send_signal(signal.SIGSTOP)
    try:
        assert await post(url, telegram.message_update(chat, f"c{chat} m0")) == 200
        await telegram.wait_for(lambda: len(telegram.of("sendMessage")) == 1, within=30)
        # the reply is at Telegram, its answer held: the stall lands between sending and recording
        await real_redis.execute_command("CLIENT", "PAUSE", int(LEASE * 4 * 1000), "ALL")
        held.set()
        await redis_answers_again(redis_server.url)
        deadline = time.monotonic() + 60
        while not await real_redis.zcard(replied):  # an event, not a time: the late record is in
            assert time.monotonic() < deadline, "the sender's late record was refused (nobody else held the chat)"
            await asyncio.sleep(0.05)
        assert telegram.texts_to(chat) == [f"Support answer to: c{chat} m0"], "sent again before it was recorded"
    finally:
        for other in others:
            other.send_signal(signal.SIGCONT)
    # the next update reaches another worker; whichever worker takes the chat next, m0 is settled
    assert await post(other_urls[0], telegram.message_update(chat, f"c{chat} m1")) == 200
    await telegram.wait_messages(chat, 2, within=60)
    assert telegram.texts_to(chat) == [f"Support answer to: c{chat} m{n}" for n in range(2)]


async def test_a_reply_in_flight_when_the_lease_is_lost_is_kept_and_sent_once(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """Issue 36: the lease is lost while Telegram's answer to the reply's sendMessage is still on the way.
    The send is not cancelled: it finishes, and its record is kept because nobody else took the chat, so
    the chat's next turn does not send the reply again (the old worker cancelled the send, recorded
    nothing, and the next holder sent it a second time). One slot: this worker takes the chat again only
    after the first turn was settled, so no other holder exists meanwhile."""
    env = worker_env(telegram, stub_llm, redis_server.url, DRAFTS_ENABLED="false", WORKER_CONCURRENCY="1")
    url = await start_webhook_worker(env, tmp_path, processes)
    worker = processes[-1]
    chat = 811
    held = telegram.gates["sendMessage"] = asyncio.Event()
    assert await post(url, telegram.message_update(chat, "m0")) == 200
    await telegram.wait_for(lambda: len(telegram.of("sendMessage")) == 1, within=30)
    # the reply is at Telegram, its answer held; Redis stops answering, so the lease cannot be renewed
    await real_redis.execute_command("CLIENT", "PAUSE", int(LEASE * 3 * 1000), "ALL")
    await worker.wait_log("lease lost", within=3 * LEASE + 10)
    await redis_answers_again(redis_server.url)
    held.set()  # only now does the worker learn that its reply went out
    assert await post(url, telegram.message_update(chat, "m1")) == 200
    await telegram.wait_messages(chat, 2, within=60)
    assert telegram.texts_to(chat) == [f"Support answer to: m{n}" for n in range(2)]
    assert "reply possibly unsent" not in worker.log.decode(errors="replace")


async def test_an_undecodable_update_is_answered_and_intake_goes_on_webhook(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """A lone UTF-16 surrogate is valid JSON but not encodable as UTF-8: it used to fail the intake."""
    url = await start_webhook_worker(worker_env(telegram, stub_llm, redis_server.url), tmp_path, processes)
    update = telegram.message_update(701, "x")
    raw = json.dumps(update).replace('"text": "x"', '"text": "broken \\ud800 text"').encode()
    assert await post(url, raw) == 200
    assert await post(url, telegram.message_update(702, "next customer")) == 200
    await telegram.wait_messages(701, 1, within=20)
    await telegram.wait_messages(702, 1, within=20)
    assert telegram.texts_to(701)[0].startswith("Support answer to: broken")


async def test_an_undecodable_update_does_not_stop_the_poller(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """Regression: in polling mode the poller task died on it with no log line, the process stayed up
    and no chat was answered again."""
    env = base_env(telegram, stub_llm) | {"REDIS_URL": redis_server.url, "POLLING_TIMEOUT_SECONDS": "1"}
    worker = BotProcess(env, tmp_path)
    processes.append(worker)
    await worker.start()
    await worker.wait_log("poller: took leadership", within=90)  # a slow start is not what is tested
    telegram.push(telegram.message_update(711, "broken \ud800 text"))
    telegram.send_text(712, "next customer")
    await telegram.wait_messages(712, 1, within=30)
    await telegram.wait_messages(711, 1, within=10)


async def test_a_damaged_session_is_quarantined_and_the_customer_answered(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """Regression: an undecodable session raised an error classified as transient, so the update was
    retried every lease forever and every later message of the chat waited behind it."""
    chat = 721
    keys = KEYS.chat(chat)
    await real_redis.hset(keys.meta, mapping={"version": "4", "next_seq": "2"})
    await real_redis.rpush(keys.msgs, b'{"s":0,"r":"user","c":"order 7718","t":5}', b"\xff\xfe damaged")
    url = await start_webhook_worker(worker_env(telegram, stub_llm, redis_server.url), tmp_path, processes)
    assert await post(url, telegram.message_update(chat, "where is my order?")) == 200
    assert await post(url, telegram.message_update(chat, "hello?")) == 200
    texts = await telegram.wait_messages(chat, 3, within=20)
    assert texts[0] == TEXTS["en"]["session_lost"]
    assert texts[1:] == ["Support answer to: where is my order?", "Support answer to: hello?"]
    assert await real_redis.lrange(keys.q_msgs, 0, -1) == [
        b'{"s":0,"r":"user","c":"order 7718","t":5}',
        b"\xff\xfe damaged",
    ]
    shown = BotProcess(worker_env(telegram, stub_llm, redis_server.url), tmp_path)
    shown.env["PYTHONWARNINGS"] = "error"
    out = await _run_cli(shown, "quarantine", "list")
    assert str(chat) in out and "1 quarantined session(s)" in out


async def _run_cli(template: BotProcess, *args: str) -> str:
    import sys

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        cwd=template.cwd,
        env=template.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


async def test_a_committed_reply_is_delivered_even_when_the_retry_hits_the_rate_limit(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """Regression: the turn was committed, sending the reply failed (Telegram 500), and the retry was
    refused by the per-chat rate limit, so the stored answer never reached the customer."""
    env = worker_env(telegram, stub_llm, redis_server.url, RATE_LIMIT_PER_MINUTE="1", DRAFTS_ENABLED="false")
    url = await start_webhook_worker(env, tmp_path, processes)
    telegram.faults["sendMessage"] = deque([{"error_code": 500, "description": "Internal Server Error"}])
    assert await post(url, telegram.message_update(731, "is my refund through?")) == 200
    texts = await telegram.wait_messages(731, 2, within=30)  # the failed attempt is recorded too
    assert texts[-1] == "Support answer to: is my refund through?"
    assert len(stub_llm.chat_requests) == 1, "the retry sent the stored reply, it did not ask the model again"


async def test_an_unreadable_update_is_dead_lettered_and_operators_can_act_on_it(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    env = worker_env(telegram, stub_llm, redis_server.url)
    url = await start_webhook_worker(env, tmp_path, processes)
    poison = telegram.message_update(741, "fine text")
    del poison["message"]["chat"]["type"]  # aiogram cannot build an Update from it
    assert await post(url, poison) == 200
    assert await post(url, telegram.message_update(741, "after it")) == 200
    await telegram.wait_messages(741, 1, within=20)  # the chat goes on behind it
    letter_id = f"741:u{poison['update_id']}"
    listed = await _run_cli(processes[0], "dead-letters", "list")  # the command itself, once
    assert letter_id in listed and "1 dead letter(s)" in listed
    settings = make_settings(telegram.base_url, stub_llm.base_url, redis_server.url)
    backend = await open_redis_backend(settings)
    try:
        shown = json.loads(await admin_output(backend, "show", letter_id))
        assert shown["payload"]["update_id"] == poison["update_id"] and "unreadable update" in shown["error"]
        assert "queued again" in await admin_output(backend, "replay", letter_id)
        for _ in range(100):  # the replay is processed (and, still unreadable, dead-lettered again)
            listed = await admin_output(backend, "list")
            if ":replay:" in listed:
                break
            await asyncio.sleep(0.1)
        replayed = next(line.split("\t")[0] for line in listed.splitlines() if ":replay:" in line)
        assert "dropped" in await admin_output(backend, "drop", replayed)
        assert "0 dead letter(s)" in await admin_output(backend, "list")
    finally:
        await backend.close()


async def admin_output(backend: RedisBackend, action: str, target: str | None = None) -> str:
    out = io.StringIO()
    await admin.dead_letters(backend, action, target, out)
    return out.getvalue()


async def test_start_up_failures_are_one_line_without_a_traceback(
    tmp_path: Path, redis_server: RedisServer, stub_llm: StubOpenAI
) -> None:
    import os
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "BOT_TOKEN": TOKEN,
        "OPENAI_API_KEY": "sk-x",
        "OPENAI_BASE_URL": stub_llm.base_url,  # reachable: a refused one stops the start before (test_settings_errors)
    }
    cases = (
        ({"REDIS_URL": f"redis://127.0.0.1:{dead_port}/0"}, "connecting to Redis: still failing"),
        (
            {"REDIS_URL": redis_server.url, "TELEGRAM_API_URL": f"http://127.0.0.1:{dead_port}"},
            "connecting to Telegram: still failing",
        ),
    )
    envs = [base | env for env, _ in cases]
    runs = await asyncio.to_thread(run_side_by_side, envs, tmp_path)  # each waits out ~8 s of retries
    for (code, output), (_, expected) in zip(runs, cases, strict=True):
        assert code == 2 and expected in output, output
        assert "Traceback" not in output and "Unclosed" not in output, output


async def test_a_port_in_use_is_a_one_line_start_up_error(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = worker_env(
            telegram,
            stub_llm,
            redis_server.url,
            METRICS_PORT=str(port),
            METRICS_HOST="127.0.0.1",
            METRICS_PORT_TRIES="1",
        )
        process = BotProcess(env, tmp_path)
        await process.start()
        assert process.process is not None
        code = await asyncio.wait_for(process.process.wait(), 90)
        assert process._reader is not None
        await process._reader
    output = process.log.decode(errors="replace")
    assert code == 2 and "cannot start: cannot listen" in output and "METRICS_PORT" in output, output
    assert "Traceback" not in output and "Unclosed" not in output, output
