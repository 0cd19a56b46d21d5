"""Chaos/load check of the scale-out guarantees: many chats sending in waves, a webhook worker killed
with SIGKILL (and replaced) after every other wave while the wave is in flight, Redis restarted once
mid-run; then every invariant is checked and the figures printed.

    .venv/bin/python -m benchmarks.chaos --chats 1000 --messages 10 --workers 3
    .venv/bin/python -m benchmarks.chaos --cluster ...   (on a 3-master Redis Cluster; the Redis
        restart becomes a restart of the master serving the ready set)
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from benchmarks.cluster import client_for, make_store, shutdown
from benchmarks.common import machine, percentile
from services.keys import KeySpace
from services.store import RedisSessionStore
from tests.e2e.processes import SECRET, BotProcess, base_env, start_webhook_worker
from tests.e2e.scenario import Report, WebhookSender, check, expected_reply, random_chats, wait_all_answered
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram


async def run(args: argparse.Namespace) -> Report:
    rng = random.Random(args.seed)
    redis = make_store(args.cluster, KeySpace("sb", "123456"))
    redis.start()
    llm, telegram = StubOpenAI(latency=args.llm_latency), StubTelegram()
    await llm.start()
    await telegram.start()
    workdir = Path(tempfile.mkdtemp(prefix="sb-chaos-"))
    env = base_env(telegram, llm) | {
        "BOT_MODE": "webhook",
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_PATH": "/hook",
        "WEBHOOK_SECRET": SECRET,
        "REDIS_URL": redis.url,
        "WORKER_LEASE_SECONDS": str(args.lease),
        "WORKER_IDLE_WAIT_SECONDS": "0.2",
        "LOG_LEVEL": "WARNING",
        "DRAFTS_ENABLED": "false",
        "WORKER_CONCURRENCY": "128",
    }
    workers: list[BotProcess] = []
    sender = WebhookSender(telegram, [], SECRET)
    kills = restarts = 0

    async def start_worker() -> None:
        sender.urls.append(await start_webhook_worker(env, workdir, workers))

    async def kill_one() -> None:
        nonlocal kills
        alive = [i for i, w in enumerate(workers) if i not in sender.dead]
        victim = rng.choice(alive)
        process = workers[victim].process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        sender.dead.add(victim)
        kills += 1
        await start_worker()

    async def restart_redis() -> None:
        nonlocal restarts
        redis.stop()
        await asyncio.sleep(1.0)
        redis.start()
        restarts += 1

    try:
        for _ in range(args.workers):
            await start_worker()
        chats = random_chats(args.chats, seed=args.seed)
        started = time.monotonic()
        limit = asyncio.Semaphore(args.concurrent_chats)

        async def send(http: aiohttp.ClientSession, chat: int, n: int) -> None:
            async with limit:
                await sender.send_chat_message(http, chat, n)

        # Waves: message n of every chat, then a chaos step while that wave is being processed.
        async with aiohttp.ClientSession() as http:
            for n in range(args.messages):
                await asyncio.gather(*(send(http, chat, n) for chat in chats))
                if args.redis_restart and n == args.messages // 2:
                    await restart_redis()
                elif n % args.kill_every_waves == 0:
                    await kill_one()
        try:
            await wait_all_answered(telegram, chats, args.messages, within=args.timeout)
        except AssertionError:
            await dump_workers(workers, sender.dead)
            raise
        elapsed = time.monotonic() - started
        client = client_for(redis)
        report = await check(
            telegram, RedisSessionStore(redis=client, keys=KeySpace("sb", "123456")), chats, args.messages, started
        )
        await client.aclose()
        first_reply: dict[str, float] = {}
        for call in telegram.of("sendMessage"):
            first_reply.setdefault(str(call.params.get("text")), call.at)
        latencies = [
            first_reply[expected_reply(c, n)] - sender.sent_at[(c, n)]
            for c in chats
            for n in range(args.messages)
            if expected_reply(c, n) in first_reply
        ]
        print(f"machine: {machine()}")
        print(
            f"workers={args.workers} llm_latency={args.llm_latency * 1000:.0f}ms lease={args.lease}s "
            f"kills={kills} redis_restarts={restarts} intake_retries={sender.retries} "
            f"redis={'cluster' if args.cluster else 'single'}"
        )
        print(
            f"messages sent={report.sent} answered={report.answered} stored_turns={report.stored_turns} "
            f"lost={report.lost} doubled={report.doubled} out_of_order={report.out_of_order} "
            f"duplicate_replies={report.duplicate_replies}"
        )
        print(
            f"throughput={report.sent / elapsed:.1f} msg/s over {elapsed:.1f}s; reply latency "
            f"p50={percentile(latencies, 50) * 1000:.0f}ms p95={percentile(latencies, 95) * 1000:.0f}ms "
            f"p99={percentile(latencies, 99) * 1000:.0f}ms max={max(latencies) * 1000:.0f}ms"
        )
        return report
    finally:
        for worker in workers:
            if worker.process is not None and worker.process.returncode is None:
                worker.process.kill()
                await worker.process.wait()
        await telegram.stop()
        await llm.stop()
        shutdown(redis)


async def dump_workers(workers: list[BotProcess], dead: set[int]) -> None:
    """Ask every live worker where its tasks wait (SIGUSR1) and print the end of its log."""
    for index, worker in enumerate(workers):
        if index not in dead and worker.process is not None and worker.process.returncode is None:
            worker.process.send_signal(signal.SIGUSR1)
    await asyncio.sleep(1.0)
    for index, worker in enumerate(workers):
        if index not in dead:
            print(f"--- worker {index} log tail ---\n{worker.log.decode(errors='replace')[-6000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrent-chats", type=int, default=300, help="chats sending at the same time")
    parser.add_argument("--llm-latency", type=float, default=0.05)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument(
        "--kill-every-waves",
        type=int,
        default=2,
        help="SIGKILL a worker after every N-th wave of messages (one message per chat)",
    )
    parser.add_argument("--no-redis-restart", dest="redis_restart", action="store_false")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cluster", action="store_true", help="run on a 3-master Redis Cluster")
    report = asyncio.run(run(parser.parse_args(argv)))
    ok = report.lost == 0 and report.doubled == 0 and report.out_of_order == 0 and report.answered == report.sent
    print("RESULT:", "OK" if ok else "INVARIANT BROKEN")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
