"""Chaos check of the scale-out guarantees: chats send in waves while a worker is SIGKILLed, frozen
past its lease, or Redis paused; Redis restarts once; a few chats /forget a secret. Provider faults
(benchmarks/provider_faults.py; --no-provider-faults): cut answers, malformed chunks, 429 storms, an
outage past WORKER_GIVE_UP_SECONDS.

    .venv/bin/python -m benchmarks.chaos --chats 1000 --messages 10 --workers 3 [--cluster]

Must be 0: lost, doubled, reordered turns, stuck chats, secrets left after /forget, lease-lost
duplicates, truncated answers delivered or stored, messages ended in silence, retries before
Retry-After. Crash-window duplicates are inherent and counted.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import signal
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import aiohttp
from redis.asyncio.cluster import RedisCluster

from benchmarks.cluster import client_for, make_store, shutdown
from benchmarks.common import machine, percentile
from benchmarks.provider_faults import (
    FaultProxy,
    Figures,
    complete_reply,
    figures,
    marked_reply,
    queued_chats,
    wait_settled,
)
from services.backends.redis.deadletters import DEAD_LETTERS_KEPT, RedisDeadLetters
from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis
from services.backends.redis.store import RedisSessionStore
from services.ports.queue import item_id_of
from tests.e2e.harness import TOKEN
from tests.e2e.processes import SECRET, BotProcess, base_env, start_webhook_worker
from tests.e2e.scenario import (
    Expected,
    Report,
    WebhookSender,
    answered,
    check,
    expected_reply,
    random_chats,
    wait_all_answered,
)
from tests.e2e.test_operations import every_value
from tests.stubs.openai_server import StubOpenAI, echo_reply
from tests.stubs.telegram_server import StubTelegram


async def run(args: argparse.Namespace) -> tuple[Report, Figures | None]:
    rng = random.Random(args.seed)
    redis = make_store(args.cluster, KeySpace("sb", "123456"))
    redis.start()
    faulty = args.provider_faults
    reply: Expected = complete_reply if faulty else expected_reply
    llm = StubOpenAI(latency=args.llm_latency, chat_reply=marked_reply if faulty else echo_reply)
    telegram = StubTelegram()
    await llm.start()
    await telegram.start()
    proxy = FaultProxy(llm.base_url, args.seed, enabled=faulty)
    await proxy.start()
    give_up = args.give_up or 3 * args.lease
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
    if faulty:  # the model behind the fault proxy, the retry settings as shipped; every other worker streams
        env = {k: v for k, v in env.items() if k != "OPENAI_MAX_RETRIES"}
        env |= {"OPENAI_BASE_URL": proxy.base_url, "WORKER_GIVE_UP_SECONDS": str(give_up)}
    workers: list[BotProcess] = []
    sender = WebhookSender(telegram, [], SECRET)
    kills = restarts = pauses = stalls = 0
    timeline: list[tuple[float, str]] = []  # (wall time, fault): printed beside any lease-lost copy
    admin = client_for(redis)

    async def start_worker() -> None:
        drafts = {"DRAFTS_ENABLED": str(faulty and len(workers) % 2 == 1).lower()}
        sender.urls.append(await start_webhook_worker(env | drafts, workdir, workers))

    async def kill_one() -> None:
        nonlocal kills
        alive = [i for i, w in enumerate(workers) if i not in sender.dead]
        victim = rng.choice(alive)
        process = workers[victim].process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        timeline.append((time.time(), f"worker {victim} SIGKILLed"))
        sender.dead.add(victim)
        kills += 1
        await start_worker()

    async def pause_one() -> None:
        nonlocal pauses
        alive = [w for i, w in enumerate(workers) if i not in sender.dead and w.process is not None]
        process = rng.choice(alive).process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        timeline.append((time.time(), f"pid {process.pid} SIGSTOPped"))
        pauses += 1
        await asyncio.sleep(2 * args.lease)  # past its lease: its chats are taken over meanwhile
        process.send_signal(signal.SIGCONT)
        timeline.append((time.time(), f"pid {process.pid} SIGCONTinued"))

    async def stall_redis() -> None:
        nonlocal stalls
        pause = ("CLIENT", "PAUSE", int(1500 * args.lease), "ALL")
        if isinstance(admin, RedisCluster):  # every master stalls
            await admin.execute_command(*pause, target_nodes=RedisCluster.PRIMARIES)
        else:
            await admin.execute_command(*pause)
        timeline.append((time.time(), f"Redis paused for {1.5 * args.lease:.1f}s"))
        stalls += 1

    faults = [kill_one, pause_one, stall_redis]

    async def restart_redis() -> None:
        nonlocal restarts
        redis.stop()
        timeline.append((time.time(), "Redis stopped"))
        await asyncio.sleep(1.0)
        redis.start()
        if not isinstance(admin, RedisCluster):
            # this script's own client: redis-py's single-server pool has no retry, and its first command
            # on a connection from before the restart would fail (the workers retry such a failure)
            await admin.connection_pool.disconnect()
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

        async def outage_midway(seconds: float) -> None:
            half = len(chats) * args.messages // 2
            await telegram.wait_for(lambda: answered(telegram, chats, args.messages, reply) >= half, args.timeout)
            proxy.outage(seconds)
            timeline.append((time.time(), f"model outage for {seconds:.1f}s"))

        outage: asyncio.Task[None] | None = None
        forgetting = ForgetProbe(telegram, sender, first_chat=100_000, count=max(1, args.chats // 20))

        # Waves: message n of every chat, then a chaos step while that wave is being processed.
        step = 0
        async with aiohttp.ClientSession() as http:
            for n in range(args.messages):
                await asyncio.gather(*(send(http, chat, n) for chat in chats), forgetting.wave(http, n, args.messages))
                if faulty and n == 0:
                    proxy.storm(args.storm)
                    timeline.append((time.time(), f"model 429 storm for {args.storm:.1f}s"))
                    outage = asyncio.create_task(outage_midway(args.outage or give_up + 3))
                if args.redis_restart and n == args.messages // 2:
                    await restart_redis()
                elif args.kill_every_waves and n % args.kill_every_waves == 0:
                    await faults[step % len(faults)]()
                    step += 1
        keys = KeySpace("sb", TOKEN.split(":")[0])
        try:
            if faulty:  # some are given up (the outage) or answered cut short (today's defect)
                await wait_settled(telegram, admin, keys, chats, args.messages, reply, within=args.timeout)
            else:
                await wait_all_answered(telegram, chats, args.messages, within=args.timeout)
            await forgetting.wait_done(within=args.timeout)
        except AssertionError:
            await dump_workers(workers, sender.dead)
            raise
        elapsed = time.monotonic() - started
        if outage is not None:
            outage.cancel()
        sessions = RedisSessionStore(redis=admin, keys=keys)
        report = await check(telegram, sessions, chats, args.messages, started, reply)
        stuck = await stuck_chats(admin, keys, settle=2 * args.lease)
        resurrected = await forgetting.resurrected(admin)
        redelivered_at = redeliveries(workers)
        crash_window, unexplained = split_duplicates(telegram, sender, chats, args.messages, redelivered_at, reply)
        found: Figures | None = None
        if faulty:
            dead = await RedisDeadLetters(redis=admin, keys=keys).list(limit=DEAD_LETTERS_KEPT)
            found = await figures(proxy, telegram, sessions, chats, args.messages, dead, sender.update_ids)
            report.lost = found.lost  # a message given up (and told so) is not lost
        lease_lost = sum(extra for *_, extra in unexplained)
        redelivered = sum(len(times) for times in redelivered_at.values())
        await admin.aclose()
        first_reply: dict[str, float] = {}
        for call in telegram.of("sendMessage"):
            first_reply.setdefault(str(call.params.get("text")), call.at)
        latencies = [
            first_reply[reply(c, n)] - sender.sent_at[(c, n)]
            for c in chats
            for n in range(args.messages)
            if reply(c, n) in first_reply
        ]
        print(f"machine: {machine()}")
        print(
            f"workers={args.workers} llm_latency={args.llm_latency * 1000:.0f}ms lease={args.lease}s "
            f"kills={kills} pauses={pauses} redis_stalls={stalls} redis_restarts={restarts} "
            f"intake_retries={sender.retries} redis={'cluster' if args.cluster else 'single'}"
        )
        print(
            f"messages sent={report.sent} answered={report.answered} stored_turns={report.stored_turns} "
            f"lost={report.lost} doubled={report.doubled} out_of_order={report.out_of_order} "
            f"stuck_chats={stuck} resurrected_after_forget={resurrected} forget_chats={forgetting.count}"
        )
        print(
            f"duplicate_replies={report.duplicate_replies} crash_window={crash_window} lease_lost={lease_lost} "
            f"(stored replies re-sent by the chat's next worker: {redelivered})"
        )
        for chat, turn, copies, resends, extra in unexplained:
            print(
                f"  lease-lost: chat {chat} turn {turn}: {extra} unexplained of {len(copies)} copies sent at "
                f"{_clock(copies)}; re-send decisions at {_clock(resends)}"
            )
        if found is not None:
            print(f"provider faults: {dict(sorted(found.faults.items()))} give_up={give_up:.1f}s")
            print(found.line())
            for line in found.early[:5]:
                print(f"  retry before Retry-After: question {line}")
        if unexplained:
            print("  faults: " + "; ".join(f"{_clock([at])} {what}" for at, what in timeline))
        print(
            f"throughput={report.sent / elapsed:.1f} msg/s over {elapsed:.1f}s; reply latency "
            f"p50={percentile(latencies, 50) * 1000:.0f}ms p95={percentile(latencies, 95) * 1000:.0f}ms "
            f"p99={percentile(latencies, 99) * 1000:.0f}ms max={max(latencies, default=0) * 1000:.0f}ms"
        )
        report.stuck, report.resurrected, report.lease_lost_duplicates = stuck, resurrected, lease_lost
        return report, found
    finally:
        for worker in workers:
            if worker.process is not None and worker.process.returncode is None:
                worker.process.kill()
                await worker.process.wait()
        await telegram.stop()
        await proxy.stop()
        await llm.stop()
        shutdown(redis)


# the engine's "re-sending a stored reply" log line, whatever module logs it (a logger name moved once
# and the duplicates it explains were all counted as lease-lost ones)
_REDELIVERY = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) WARNING [\w.]+: chat (-?\d+) turn (u\d+): committed earlier",
    re.MULTILINE,
)


def redeliveries(workers: list[BotProcess]) -> dict[tuple[int, str], list[float]]:
    """(chat, turn id) → wall times, in order, at which a worker decided to re-send the stored reply
    (from the workers' logs; a turn whose next worker was cut off too is re-sent again)."""
    found: dict[tuple[int, str], list[float]] = {}
    for worker in workers:
        for when, chat, turn in _REDELIVERY.findall(worker.log.decode(errors="replace")):
            at = datetime.strptime(when, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.setdefault((int(chat), turn), []).append(at)
    return {key: sorted(times) for key, times in found.items()}


def _clock(times: list[float]) -> str:
    return ", ".join(datetime.fromtimestamp(at).strftime("%H:%M:%S.%f")[:-3] for at in times) or "-"


LeaseLost = tuple[int, str, list[float], list[float], int]
"""(chat, turn id, copies' send times, re-send decisions' times, copies no re-send explains)"""


def split_duplicates(
    telegram: StubTelegram,
    sender: WebhookSender,
    chats: list[int],
    messages: int,
    redelivered_at: dict[tuple[int, str], list[float]],
    reply: Expected = expected_reply,
) -> tuple[int, list[LeaseLost]]:
    """(crash window duplicates, the turns with lease-lost ones). The k-th extra copy is in the crash
    window when the k-th re-send decision explains it: the copy before it reached Telegram before that
    decision (its sender still had the chat, then died or was cut off before marking it sent; the next
    worker may be cut off in the same window again). A copy that a worker sent after the chat's next
    worker took over, or one no re-send explains, is a lease-lost one."""
    sends: dict[str, list[float]] = {}
    for call in telegram.of("sendMessage"):
        sends.setdefault(str(call.params.get("text")), []).append(call.wall)
    crash_window, lease_lost = 0, []
    for chat in chats:
        for n in range(messages):
            times = sorted(sends.get(reply(chat, n), []))
            if len(times) < 2:
                continue
            turn = item_id_of(sender.update_ids[(chat, n)])
            resends = redelivered_at.get((chat, turn), [])
            explained = explained_copies(times, resends)
            crash_window += explained
            if len(times) - 1 > explained:
                lease_lost.append((chat, turn, times, resends, len(times) - 1 - explained))
    return crash_window, lease_lost


def explained_copies(copies: list[float], resends: list[float]) -> int:
    """How many extra copies of one reply the re-sends explain. Each re-send decision (by a worker
    holding the chat) sends one copy; the first processing sends at most one more, and only before the
    first re-send decision (its sender still had the chat; log timestamps have millisecond resolution).
    Copies beyond that were sent by a worker that had lost the chat."""
    if len(copies) < 2:
        return 0
    first = min(copies)
    original = 1 if not resends or first <= min(resends) + 0.001 else 0
    allowed = len(resends) + original
    return len(copies) - 1 - max(0, len(copies) - allowed)


class ForgetProbe:
    """Chats that send a secret in the first wave and /forget in the middle one, under the same faults;
    afterwards no byte of the secret may be left in Redis."""

    def __init__(self, telegram: StubTelegram, sender: WebhookSender, *, first_chat: int, count: int) -> None:
        self._telegram = telegram
        self._sender = sender
        self.chats = list(range(first_chat, first_chat + count))
        self.count = count

    @staticmethod
    def secret(chat: int) -> str:
        return f"secret-{chat}-4111"

    async def wave(self, http: aiohttp.ClientSession, n: int, waves: int) -> None:
        text = self.secret if n == 0 else (lambda _chat: "/forget") if n == waves // 2 else None
        if text is not None:
            await asyncio.gather(
                *(self._sender.post(http, self._telegram.message_update(c, text(c))) for c in self.chats)
            )

    async def wait_done(self, within: float) -> None:
        for chat in self.chats:
            await self._telegram.wait_messages(chat, 2, within=within)

    async def resurrected(self, redis: AnyRedis) -> int:
        everything = b"".join([await every_value(redis, key) async for key in redis.scan_iter(count=1000)])
        return sum(1 for chat in self.chats if self.secret(chat).encode() in everything)


async def stuck_chats(redis: AnyRedis, keys: KeySpace, settle: float) -> int:
    """Chats with queued work that no worker finishes (after letting in-flight work settle)."""
    await asyncio.sleep(settle)
    return await queued_chats(redis, keys)


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
        help="a worker fault after every N-th wave of messages (one message per chat); 0: none",
    )
    parser.add_argument("--no-redis-restart", dest="redis_restart", action="store_false")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cluster", action="store_true", help="run on a 3-master Redis Cluster")
    parser.add_argument(
        "--no-provider-faults", dest="provider_faults", action="store_false", help="a model server that never fails"
    )
    parser.add_argument("--give-up", type=float, default=0, help="WORKER_GIVE_UP_SECONDS (default: 3 leases)")
    parser.add_argument("--outage", type=float, default=0, help="model outage, seconds (default: give-up + 3)")
    parser.add_argument("--storm", type=float, default=2.0, help="seconds every model request gets 429")
    report, found = asyncio.run(run(parser.parse_args(argv)))
    # with provider faults, a message given up (and told so) counts as settled, not as lost
    settled = found.unresolved == 0 if found else report.answered == report.sent
    ok = (
        settled
        and report.lost == 0
        and report.doubled == 0
        and report.out_of_order == 0
        and report.stuck == 0
        and report.resurrected == 0
        and report.lease_lost_duplicates == 0
        and (found is None or not (found.truncated_delivered or found.truncated_stored or found.silent))
        and (found is None or found.early_retries == 0)
    )
    print("RESULT:", "OK" if ok else "INVARIANT BROKEN")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
