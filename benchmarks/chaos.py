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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import aiohttp
from redis.asyncio.cluster import RedisCluster

from benchmarks.cluster import ChaosCluster, client_for, make_store, shutdown
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
from tests.conftest import RedisServer
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


def _worker_env(
    args: argparse.Namespace, telegram: StubTelegram, llm: StubOpenAI, redis_url: str, proxy: FaultProxy, give_up: float
) -> dict[str, str]:
    env = base_env(telegram, llm) | {
        "BOT_MODE": "webhook",
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_PATH": "/hook",
        "WEBHOOK_SECRET": SECRET,
        "REDIS_URL": redis_url,
        "WORKER_LEASE_SECONDS": str(args.lease),
        "WORKER_IDLE_WAIT_SECONDS": "0.2",
        "LOG_LEVEL": "WARNING",
        "DRAFTS_ENABLED": "false",
        "WORKER_CONCURRENCY": "128",
    }
    if (
        args.provider_faults
    ):  # the model behind the fault proxy, the retry settings as shipped; every other worker streams
        env = {k: v for k, v in env.items() if k != "OPENAI_MAX_RETRIES"}
        env |= {"OPENAI_BASE_URL": proxy.base_url, "WORKER_GIVE_UP_SECONDS": str(give_up)}
    return env


@dataclass
class _Findings:
    """What one run found, for the printout and the invariants."""

    report: Report
    found: Figures | None
    stuck: int
    resurrected: int
    crash_window: int
    unexplained: list[LeaseLost]
    redelivered: int
    latencies: list[float]
    elapsed: float

    @property
    def lease_lost(self) -> int:
        return sum(extra for *_, extra in self.unexplained)


def _latencies(
    telegram: StubTelegram, sender: WebhookSender, chats: list[int], messages: int, reply: Expected
) -> list[float]:
    """Each message's time to the first copy of its reply."""
    first_reply: dict[str, float] = {}
    for call in telegram.of("sendMessage"):
        first_reply.setdefault(str(call.params.get("text")), call.at)
    return [
        first_reply[reply(c, n)] - sender.sent_at[(c, n)]
        for c in chats
        for n in range(messages)
        if reply(c, n) in first_reply
    ]


class _Chaos:
    """One run's workers and the faults done to them and to Redis (counted, and timed for the report)."""

    def __init__(
        self,
        args: argparse.Namespace,
        redis: RedisServer | ChaosCluster,
        telegram: StubTelegram,
        proxy: FaultProxy,
        env: dict[str, str],
        workdir: Path,
        rng: random.Random,
    ) -> None:
        self.args = args
        self.rng = rng
        self.redis = redis
        self.telegram = telegram
        self.proxy = proxy
        self.env = env
        self.workdir = workdir
        self.faulty = args.provider_faults
        self.workers: list[BotProcess] = []
        self.sender = WebhookSender(telegram, [], SECRET)
        self.kills = self.restarts = self.pauses = self.stalls = 0
        self.timeline: list[tuple[float, str]] = []  # (wall time, fault): printed beside any lease-lost copy
        self.admin = client_for(redis)
        self.faults = [self.kill_one, self.pause_one, self.stall_redis]

    async def start_worker(self) -> None:
        drafts = {"DRAFTS_ENABLED": str(self.faulty and len(self.workers) % 2 == 1).lower()}
        self.sender.urls.append(await start_webhook_worker(self.env | drafts, self.workdir, self.workers))

    async def kill_one(self) -> None:
        alive = [i for i, w in enumerate(self.workers) if i not in self.sender.dead]
        victim = self.rng.choice(alive)
        process = self.workers[victim].process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        self.timeline.append((time.time(), f"worker {victim} SIGKILLed"))
        self.sender.dead.add(victim)
        self.kills += 1
        await self.start_worker()

    async def pause_one(self) -> None:
        alive = [w for i, w in enumerate(self.workers) if i not in self.sender.dead and w.process is not None]
        process = self.rng.choice(alive).process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        self.timeline.append((time.time(), f"pid {process.pid} SIGSTOPped"))
        self.pauses += 1
        await asyncio.sleep(2 * self.args.lease)  # past its lease: its chats are taken over meanwhile
        process.send_signal(signal.SIGCONT)
        self.timeline.append((time.time(), f"pid {process.pid} SIGCONTinued"))

    async def stall_redis(self) -> None:
        pause = ("CLIENT", "PAUSE", int(1500 * self.args.lease), "ALL")
        if isinstance(self.admin, RedisCluster):  # every master stalls
            await self.admin.execute_command(*pause, target_nodes=RedisCluster.PRIMARIES)
        else:
            await self.admin.execute_command(*pause)
        self.timeline.append((time.time(), f"Redis paused for {1.5 * self.args.lease:.1f}s"))
        self.stalls += 1

    async def restart_redis(self) -> None:
        self.redis.stop()
        self.timeline.append((time.time(), "Redis stopped"))
        await asyncio.sleep(1.0)
        self.redis.start()
        if not isinstance(self.admin, RedisCluster):
            # this script's own client: redis-py's single-server pool has no retry, and its first command
            # on a connection from before the restart would fail (the workers retry such a failure)
            await self.admin.connection_pool.disconnect()
        self.restarts += 1

    async def run(self, reply: Expected, give_up: float) -> tuple[Report, Figures | None]:
        args = self.args
        for _ in range(args.workers):
            await self.start_worker()
        chats = random_chats(args.chats, seed=args.seed)
        started = time.monotonic()
        forgetting = ForgetProbe(self.telegram, self.sender, first_chat=100_000, count=max(1, args.chats // 20))
        outage = await self.waves(chats, forgetting, reply, give_up)
        keys = KeySpace("sb", TOKEN.split(":")[0])
        await self.settle(chats, forgetting, reply, keys)
        elapsed = time.monotonic() - started
        if outage is not None:
            outage.cancel()
        findings = await self.findings(chats, forgetting, reply, keys, started, elapsed)
        self.print(findings, forgetting.count, give_up)
        report = findings.report
        report.stuck, report.resurrected = findings.stuck, findings.resurrected
        report.lease_lost_duplicates = findings.lease_lost
        return report, findings.found

    async def waves(
        self, chats: list[int], forgetting: ForgetProbe, reply: Expected, give_up: float
    ) -> asyncio.Task[None] | None:
        """Waves: message n of every chat, then a chaos step while that wave is being processed."""
        args = self.args
        limit = asyncio.Semaphore(args.concurrent_chats)

        async def send(http: aiohttp.ClientSession, chat: int, n: int) -> None:
            async with limit:
                await self.sender.send_chat_message(http, chat, n)

        outage: asyncio.Task[None] | None = None
        step = 0
        async with aiohttp.ClientSession() as http:
            for n in range(args.messages):
                await asyncio.gather(*(send(http, chat, n) for chat in chats), forgetting.wave(http, n, args.messages))
                if self.faulty and n == 0:
                    outage = self.storm(chats, reply, give_up)
                if args.redis_restart and n == args.messages // 2:
                    await self.restart_redis()
                elif args.kill_every_waves and n % args.kill_every_waves == 0:
                    await self.faults[step % len(self.faults)]()
                    step += 1
        return outage

    def storm(self, chats: list[int], reply: Expected, give_up: float) -> asyncio.Task[None]:
        """A 429 storm now, and a model outage once half the messages are answered."""
        self.proxy.storm(self.args.storm)
        self.timeline.append((time.time(), f"model 429 storm for {self.args.storm:.1f}s"))
        return asyncio.create_task(self.outage_midway(chats, reply, self.args.outage or give_up + 3))

    async def outage_midway(self, chats: list[int], reply: Expected, seconds: float) -> None:
        args = self.args
        half = len(chats) * args.messages // 2
        await self.telegram.wait_for(lambda: answered(self.telegram, chats, args.messages, reply) >= half, args.timeout)
        self.proxy.outage(seconds)
        self.timeline.append((time.time(), f"model outage for {seconds:.1f}s"))

    async def settle(self, chats: list[int], forgetting: ForgetProbe, reply: Expected, keys: KeySpace) -> None:
        args = self.args
        try:
            if self.faulty:  # some are given up (the outage) or answered cut short (today's defect)
                await wait_settled(self.telegram, self.admin, keys, chats, args.messages, reply, within=args.timeout)
            else:
                await wait_all_answered(self.telegram, chats, args.messages, within=args.timeout)
            await forgetting.wait_done(within=args.timeout)
        except AssertionError:
            await dump_workers(self.workers, self.sender.dead)
            raise

    async def findings(
        self,
        chats: list[int],
        forgetting: ForgetProbe,
        reply: Expected,
        keys: KeySpace,
        started: float,
        elapsed: float,
    ) -> _Findings:
        args, admin = self.args, self.admin
        sessions = RedisSessionStore(redis=admin, keys=keys)
        report = await check(self.telegram, sessions, chats, args.messages, started, reply)
        stuck = await stuck_chats(admin, keys, settle=2 * args.lease)
        resurrected = await forgetting.resurrected(admin)
        redelivered_at = redeliveries(self.workers)
        crash_window, unexplained = split_duplicates(
            self.telegram, self.sender, chats, args.messages, redelivered_at, reply
        )
        found: Figures | None = None
        if self.faulty:
            dead = await RedisDeadLetters(redis=admin, keys=keys).list(limit=DEAD_LETTERS_KEPT)
            found = await figures(
                self.proxy,
                self.telegram,
                sessions,
                chats,
                args.messages,
                dead,
                self.sender.update_ids,
                taken_over(self.workers),
                args.lease,
            )
            report.lost = found.lost  # a message given up (and told so) is not lost
        redelivered = sum(len(times) for times in redelivered_at.values())
        await admin.aclose()
        latencies = _latencies(self.telegram, self.sender, chats, args.messages, reply)
        return _Findings(report, found, stuck, resurrected, crash_window, unexplained, redelivered, latencies, elapsed)

    def print(self, f: _Findings, forget_chats: int, give_up: float) -> None:
        args, report, latencies = self.args, f.report, f.latencies
        print(f"machine: {machine()}")
        print(
            f"workers={args.workers} llm_latency={args.llm_latency * 1000:.0f}ms lease={args.lease}s "
            f"kills={self.kills} pauses={self.pauses} redis_stalls={self.stalls} redis_restarts={self.restarts} "
            f"intake_retries={self.sender.retries} redis={'cluster' if args.cluster else 'single'}"
        )
        print(
            f"messages sent={report.sent} answered={report.answered} stored_turns={report.stored_turns} "
            f"lost={report.lost} doubled={report.doubled} out_of_order={report.out_of_order} "
            f"stuck_chats={f.stuck} resurrected_after_forget={f.resurrected} forget_chats={forget_chats}"
        )
        print(
            f"duplicate_replies={report.duplicate_replies} crash_window={f.crash_window} lease_lost={f.lease_lost} "
            f"(stored replies re-sent by the chat's next worker: {f.redelivered})"
        )
        for chat, turn, copies, resends, extra in f.unexplained:
            print(
                f"  lease-lost: chat {chat} turn {turn}: {extra} unexplained of {len(copies)} copies sent at "
                f"{_clock(copies)}; re-send decisions at {_clock(resends)}"
            )
        if f.found is not None:
            print(f"provider faults: {dict(sorted(f.found.faults.items()))} give_up={give_up:.1f}s")
            print(f.found.line())
            for line in f.found.early[:5]:
                print(f"  retry before Retry-After: question {line}")
        if f.unexplained:
            print("  faults: " + "; ".join(f"{_clock([at])} {what}" for at, what in self.timeline))
        print(
            f"throughput={report.sent / f.elapsed:.1f} msg/s over {f.elapsed:.1f}s; reply latency "
            f"p50={percentile(latencies, 50) * 1000:.0f}ms p95={percentile(latencies, 95) * 1000:.0f}ms "
            f"p99={percentile(latencies, 99) * 1000:.0f}ms max={max(latencies, default=0) * 1000:.0f}ms"
        )


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
    env = _worker_env(args, telegram, llm, redis.url, proxy, give_up)
    chaos = _Chaos(args, redis, telegram, proxy, env, workdir, rng)
    try:
        return await chaos.run(reply, give_up)
    finally:
        for worker in chaos.workers:
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


# a worker's heartbeat finding another worker holding its chat (its running attempt is cancelled)
_TAKEN_OVER = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) WARNING [\w.]+: chat (-?\d+): lease lost \(another worker holds it\)",
    re.MULTILINE,
)


def taken_over(workers: list[BotProcess]) -> dict[int, list[float]]:
    """Chat → wall times at which a worker found another holding the chat it was serving (its logs)."""
    found: dict[int, list[float]] = {}
    for worker in workers:
        for when, chat in _TAKEN_OVER.findall(worker.log.decode(errors="replace")):
            found.setdefault(int(chat), []).append(datetime.strptime(when, "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return found


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
