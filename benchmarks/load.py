"""Throughput and reply latency of N webhook workers on one real redis-server, against the stub Bot API
and a stub OpenAI server with a fixed latency; chats behave like customers (closed loop, think time).

    .venv/bin/python -m benchmarks.load --workers 1 2 4 --chats 200 --messages 8 --llm-latency 0.2

Prints turns/s, latency percentiles, the overhead (latency − the model's; net: minus the stub's
time), the workers' CPU ms per turn, compaction vs ordinary turns. ``--variant LABEL:KEY=VALUE,...``
adds worker environment (``PYTHONPATH=`` another checkout, ``WORKER_MODULE=benchmarks.naive_bot``),
``--repeat`` alternates them, ``--pin`` gives each worker a core. Figures: benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import redis

from benchmarks.common import machine, percentile
from benchmarks.profile import Breakdown, Sampler, cpu_seconds
from tests.conftest import RedisServer
from tests.e2e.processes import SECRET, BotProcess, base_env, start_webhook_worker
from tests.stubs.openai_server import StubOpenAI, customer_texts
from tests.stubs.telegram_server import StubTelegram

FILLER = (
    "I still need help with the delivery of my parcel, the tracking page has not changed since Monday. "
    "The courier did not call me either, and I am at home all day, so I do not understand what happened."
)
_REPLY = re.compile(r"^Support answer to: c(\d+) m(\d+)\b")
_TURN = re.compile(r"c(\d+) m(\d+)")
"""A customer's message text, ``c<chat> m<n> …``: the turn it belongs to."""


@dataclass
class RunFigures:
    workers: int
    turns: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    compaction_latencies: list[float] = field(default_factory=list)
    """Turns after whose reply a (proactive) compaction ran."""
    forced_latencies: list[float] = field(default_factory=list)
    """Turns that waited for a compaction before their reply (the prompt could not fit otherwise)."""
    ordinary_latencies: list[float] = field(default_factory=list)
    net_overheads: list[float] = field(default_factory=list)
    """Each turn's latency minus the time the model stub spent on its chat request (from the request's
    arrival until its answer is complete: the sleep, which overshoots by ~0.4 ms, the stub's tokenizing
    of the prompt for its cache figures, a stream's writes). Turns that waited for a forced compaction
    are left out: their summary call is model time too."""
    model_stub_seconds: list[float] = field(default_factory=list)
    summary_calls: int = 0
    cpu_seconds: float = 0.0
    """CPU time (user + system) of all worker processes while the load ran."""
    profile: Breakdown | None = None
    harness_busy: float = 0.0
    """CPU share of one core used by this process (load generator and both stubs) while the load ran."""
    redis_calls: dict[str, int] = field(default_factory=dict)
    """Commands redis-server executed while the load ran, by command (``INFO commandstats``)."""
    bot_api_calls: dict[str, int] = field(default_factory=dict)
    """Bot API requests the workers made while the load ran, by method."""
    instructions: int = 0
    """Instructions the worker processes executed while the load ran (``--callgrind``)."""
    refused: int = 0
    """Webhook posts answered 503 (not taken in for now) and sent again, as Telegram would."""


def redis_calls(url: str) -> dict[str, int]:
    """Commands executed so far by the server at ``url``, by name; EVALSHA counts once per script call."""
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(values["calls"]) for name, values in stats.items()}


def callgrind_prefix(workdir: Path) -> list[str]:
    """Run a worker under callgrind with counting off (``callgrind_control -i on`` starts it)."""
    out = workdir / "callgrind.%p"
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


async def callgrind_control(*args: object) -> None:
    *options, pids = args
    for pid in cast(list[int], pids):
        control = await asyncio.create_subprocess_exec(
            "callgrind_control", *map(str, options), str(pid), stdout=asyncio.subprocess.DEVNULL
        )
        if await control.wait() != 0:
            raise RuntimeError(f"callgrind_control {options} {pid} failed")


async def callgrind_instructions(pids: list[int], workdir: Path) -> int:
    """Stop counting, dump, and return the instructions counted since counting was switched on."""
    await callgrind_control("-i", "off", pids)
    await callgrind_control("-d", pids)
    return await asyncio.to_thread(_dumped_totals, pids, workdir)


def _dumped_totals(pids: list[int], workdir: Path) -> int:
    total = 0
    for pid in pids:
        for dump in workdir.glob(f"callgrind.{pid}.*"):  # callgrind.<pid> itself is written at exit
            match = re.search(r"^totals: (\d+)", dump.read_text(errors="replace"), re.MULTILINE)
            total += int(match.group(1)) if match else 0
    return total


class ReplyWatcher:
    """Wakes the chat whose reply the stub Bot API just received."""

    def __init__(self, telegram: StubTelegram) -> None:
        self._telegram = telegram
        self._seen = 0
        self.replied_at: dict[tuple[int, int], float] = {}
        self.events: dict[tuple[int, int], asyncio.Event] = {}

    async def run(self) -> None:
        while True:
            calls = self._telegram.calls
            while self._seen < len(calls):
                call = calls[self._seen]
                self._seen += 1
                if call.method != "sendMessage":
                    continue
                match = _REPLY.match(str(call.params.get("text", "")))
                if match:
                    key = (int(match.group(1)), int(match.group(2)))
                    self.replied_at.setdefault(key, call.at)
                    self.events.setdefault(key, asyncio.Event()).set()
            await asyncio.sleep(0.001)

    async def wait(self, key: tuple[int, int], within: float) -> None:
        await asyncio.wait_for(self.events.setdefault(key, asyncio.Event()).wait(), within)


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    label, _, pairs = text.partition(":")
    env = dict(pair.split("=", 1) for pair in pairs.split(",") if pair)
    return label, env


def _pin(args: argparse.Namespace, workers_count: int, all_cores: set[int]) -> list[int]:
    """With ``--pin``, the cores the workers get; this process keeps the others."""
    if not args.pin:
        return []
    worker_cores = sorted(all_cores)[-workers_count:]
    os.sched_setaffinity(0, all_cores - set(worker_cores))  # redis-server, started next, inherits it
    return worker_cores


@dataclass
class _ModelTap:
    """What the model stub saw: each summary call (when, and the customer texts it folded) and each
    turn's time in the stub's chat requests."""

    summary_times: list[tuple[float, list[str]]] = field(default_factory=list)
    model_seconds: dict[tuple[int, int], float] = field(default_factory=dict)

    def install(self, llm: StubOpenAI) -> None:
        original = llm.summary_reply

        def summary_reply(body: dict[str, Any]) -> str:
            self.summary_times.append((time.monotonic(), customer_texts(body)))
            return original(body)

        llm.summary_reply = summary_reply
        llm.on_handled = self.handled

    def handled(self, body: dict[str, Any], seconds: float) -> None:
        if "response_format" in body:
            return  # a summary call (the turns that wait for one are left out of the net figure)
        texts = customer_texts(body)
        if texts and (m := _TURN.match(texts[-1])):
            key = (int(m.group(1)), int(m.group(2)))
            self.model_seconds[key] = self.model_seconds.get(key, 0.0) + seconds


def _worker_env(
    args: argparse.Namespace, telegram: StubTelegram, llm: StubOpenAI, redis_url: str, extra_env: dict[str, str] | None
) -> tuple[dict[str, str], str]:
    """The workers' environment and the module they run (``WORKER_MODULE``, else the bot)."""
    env = (
        base_env(telegram, llm)
        | {
            "BOT_MODE": "webhook",
            "WEBHOOK_HOST": "127.0.0.1",
            "WEBHOOK_PATH": "/hook",
            "WEBHOOK_SECRET": SECRET,
            "REDIS_URL": redis_url,
            "LOG_LEVEL": args.log_level,
            "WORKER_CONCURRENCY": str(args.chats),
            "CHAT_INPUT_TOKEN_BUDGET": str(args.budget),
            "SUMMARY_MAX_TOKENS": "300",
            "DRAFTS_ENABLED": "true" if args.drafts else "false",
        }
        # under valgrind a uvloop worker never acted on SIGTERM (it sat in epoll_wait): asyncio's loop
        | ({"EVENT_LOOP": "asyncio"} if args.callgrind else {})
        | (extra_env or {})
    )
    module = env.pop("WORKER_MODULE", "bot")
    if module.startswith("benchmarks."):  # not installed in the venv: run from this checkout
        inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).parent.parent), inherited) if p)
    return env, module


async def _start_workers(
    args: argparse.Namespace,
    count: int,
    env: dict[str, str],
    module: str,
    workdir: Path,
    workers: list[BotProcess],
    worker_cores: list[int],
) -> list[str]:
    """Start ``count`` webhook workers (into ``workers``, for the caller to stop); their URLs."""
    urls: list[str] = []
    prefix: tuple[str, ...] = tuple(callgrind_prefix(workdir)) if args.callgrind else ()
    for index in range(count):
        if worker_cores:  # the whole process, every thread it starts included
            prefix = ("taskset", "--cpu-list", str(worker_cores[index]))
        urls.append(await start_webhook_worker(env, workdir, workers, prefix=prefix, module=module))
    return urls


class _Customers:
    """The chats, closed loop: each sends its messages one at a time, each after the reply to the last
    and a think time, and notes when it sent each."""

    def __init__(
        self, args: argparse.Namespace, telegram: StubTelegram, watcher: ReplyWatcher, urls: list[str]
    ) -> None:
        self._args = args
        self._telegram = telegram
        self._watcher = watcher
        self._urls = urls
        self._chats = list(range(1, args.chats + 1))
        self.sent_at: dict[tuple[int, int], float] = {}
        self.refused = 0

    async def run(self) -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            await asyncio.gather(*(self._customer(http, chat) for chat in self._chats))

    async def _customer(self, http: aiohttp.ClientSession, chat: int) -> None:
        await asyncio.sleep(self._args.think * chat / len(self._chats))  # spread the first messages
        for n in range(self._args.messages):
            update = self._telegram.message_update(chat, f"c{chat} m{n} {FILLER}")
            self.sent_at[(chat, n)] = time.monotonic()
            await self._post(http, self._urls[(chat + n) % len(self._urls)], update)
            await self._watcher.wait((chat, n), within=120)
            await asyncio.sleep(self._args.think)

    async def _post(self, http: aiohttp.ClientSession, url: str, update: dict[str, Any]) -> None:
        while True:  # as Telegram does, an update refused for now (503) is offered again
            async with http.post(url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}) as response:
                if response.status != 503:
                    assert response.status == 200, response.status
                    return
            self.refused += 1
            await asyncio.sleep(0.1)


async def _start_samplers(args: argparse.Namespace, pids: list[int], workdir: Path) -> list[Sampler]:
    samplers = [Sampler(pid, workdir / f"profile-{pid}.txt") for pid in pids] if args.profile else []
    for sampler in samplers:
        await sampler.start()
    return samplers


async def _measured_load(
    args: argparse.Namespace,
    workers_count: int,
    workdir: Path,
    pids: list[int],
    redis_url: str,
    telegram: StubTelegram,
    customers: _Customers,
    tap: _ModelTap,
) -> RunFigures:
    """Run the customers; the run's totals (time, CPU, instructions, calls), latencies not yet."""
    if args.callgrind:
        await callgrind_control("-i", "on", pids)
    cpu_before = sum(cpu_seconds(pid) for pid in pids)
    calls_before = redis_calls(redis_url)
    telegram_before = len(telegram.calls)
    harness_before = time.process_time()
    started = time.monotonic()
    await customers.run()
    seconds = time.monotonic() - started
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
    harness_cpu = time.process_time() - harness_before
    instructions = await callgrind_instructions(pids, workdir) if args.callgrind else 0
    redis_per_command = {name: count - calls_before.get(name, 0) for name, count in redis_calls(redis_url).items()}
    bot_api = [call.method for call in telegram.calls[telegram_before:]]
    return RunFigures(
        workers_count,
        len(customers.sent_at),
        seconds,
        summary_calls=len(tap.summary_times),
        cpu_seconds=cpu,
        harness_busy=harness_cpu / seconds,
        redis_calls={name: n for name, n in redis_per_command.items() if n > 0},
        bot_api_calls={name: bot_api.count(name) for name in sorted(set(bot_api))},
        instructions=instructions,
        refused=customers.refused,
    )


async def _add_profile(figures: RunFigures, samplers: list[Sampler], args: argparse.Namespace) -> None:
    if not samplers:
        return
    figures.profile = Breakdown()
    for sampler in samplers:
        raw = await sampler.stop()
        figures.profile.add_raw(raw)
        if args.profile_dir:
            await asyncio.to_thread(Path(args.profile_dir, sampler.output.name).write_text, raw)


def _compactions(
    summary_times: list[tuple[float, list[str]]],
    sent_at: dict[tuple[int, int], float],
    replied_at: dict[tuple[int, int], float],
) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """The turns that waited for a summary call (forced), and those after whose reply one ran."""
    compacted_after: set[tuple[int, int]] = set()
    waited: set[tuple[int, int]] = set()
    for at, texts in summary_times:
        chat_ids = {int(m.group(1)) for t in texts if (m := _TURN.match(t))}
        for chat in chat_ids:
            turns = [k for k in sent_at if k[0] == chat]
            in_flight = [k for k in turns if sent_at[k] <= at < replied_at[k]]
            if in_flight:  # the summary call happened while the customer waited: forced
                waited.add(in_flight[0])
                continue
            done = [(replied_at[k], k) for k in turns if replied_at[k] <= at]
            if done:  # after the last reply: proactive, triggered by that turn
                compacted_after.add(max(done)[1])
    return waited, compacted_after


def _add_latencies(
    figures: RunFigures, sent_at: dict[tuple[int, int], float], replied_at: dict[tuple[int, int], float], tap: _ModelTap
) -> None:
    waited, compacted_after = _compactions(tap.summary_times, sent_at, replied_at)
    model_seconds = tap.model_seconds
    for key, sent in sent_at.items():
        latency = replied_at[key] - sent
        figures.latencies.append(latency)
        if key in model_seconds and key not in waited:
            figures.net_overheads.append(latency - model_seconds[key])
            figures.model_stub_seconds.append(model_seconds[key])
        if key in waited:
            figures.forced_latencies.append(latency)
        elif key in compacted_after:
            figures.compaction_latencies.append(latency)
        else:
            figures.ordinary_latencies.append(latency)


async def _stop(
    args: argparse.Namespace,
    workers: list[BotProcess],
    telegram: StubTelegram,
    llm: StubOpenAI,
    redis: RedisServer,
    all_cores: set[int],
) -> None:
    for worker in workers:
        await worker.stop(within=180 if args.callgrind else 20)  # ~50x slower under callgrind
        if args.log_level == "DEBUG":
            print(worker.log.decode(errors="replace")[-3000:])
    await telegram.stop()
    await llm.stop()
    redis.stop()
    gc.unfreeze()  # this run's stubs and figures can go once they are garbage
    os.sched_setaffinity(0, all_cores)


async def one_run(
    args: argparse.Namespace, workers_count: int, workdir: Path, extra_env: dict[str, str] | None = None
) -> RunFigures:
    all_cores = os.sched_getaffinity(0)
    worker_cores = _pin(args, workers_count, all_cores)
    redis = RedisServer()
    redis.start()
    llm, telegram = StubOpenAI(latency=args.llm_latency), StubTelegram()
    tap = _ModelTap()
    tap.install(llm)
    await llm.start()
    await telegram.start()
    # the stubs and the load generator share this process: its own full collections would stall
    # them and show as the bot's latency (the workers freeze their start-up heap the same way)
    gc.collect()
    gc.freeze()
    env, module = _worker_env(args, telegram, llm, redis.url, extra_env)
    workers: list[BotProcess] = []
    try:
        urls = await _start_workers(args, workers_count, env, module, workdir, workers, worker_cores)
        watcher = ReplyWatcher(telegram)
        watching = asyncio.create_task(watcher.run())
        customers = _Customers(args, telegram, watcher, urls)
        pids = [worker.process.pid for worker in workers if worker.process is not None]
        samplers = await _start_samplers(args, pids, workdir)
        figures = await _measured_load(args, workers_count, workdir, pids, redis.url, telegram, customers, tap)
        watching.cancel()
        await _add_profile(figures, samplers, args)
        _add_latencies(figures, customers.sent_at, watcher.replied_at, tap)
        return figures
    finally:
        await _stop(args, workers, telegram, llm, redis, all_cores)


def plot(rows: list[dict[str, Any]], path: str, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    workers = [str(row["workers"]) for row in rows]
    width = 0.25
    for offset, key in ((-width, "p50_ms"), (0.0, "p95_ms"), (width, "p99_ms")):
        ax.bar([i + offset for i in range(len(rows))], [row[key] for row in rows], width, label=key[:3])
    ax.axhline(args.llm_latency * 1000, color="grey", linestyle="--", linewidth=0.8, label="LLM latency")
    ax.set_xticks(range(len(rows)), workers)
    ax.set_xlabel("worker processes")
    ax.set_ylabel("reply latency, ms")
    ax.set_title(f"Reply latency, {args.chats} concurrent chats, LLM {args.llm_latency * 1000:.0f} ms")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def summarize(fig: RunFigures, label: str, args: argparse.Namespace) -> dict[str, Any]:
    lat = fig.latencies
    ratio = (
        percentile(fig.compaction_latencies, 50) / percentile(fig.ordinary_latencies, 50)
        if fig.compaction_latencies
        else float("nan")
    )
    row = {
        "workers": fig.workers,
        "variant": label,
        "turns_per_s": fig.turns / fig.seconds,
        "p50_ms": percentile(lat, 50) * 1000,
        "p95_ms": percentile(lat, 95) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "overhead_p50_ms": (percentile(lat, 50) - args.llm_latency) * 1000,
        "overhead_p99_ms": (percentile(lat, 99) - args.llm_latency) * 1000,
        "cpu_ms_per_turn": fig.cpu_seconds * 1000 / fig.turns,
        "compaction_turns": len(fig.compaction_latencies),
        "compaction_ratio_p50": ratio,
        "forced_compaction_turns": len(fig.forced_latencies),
        "harness_busy": fig.harness_busy,
        "instructions_per_turn": fig.instructions / fig.turns,
    }
    print(
        f"{fig.workers:>7} {row['turns_per_s']:>8.1f} {row['p50_ms']:>7.0f} {row['p95_ms']:>7.0f} "
        f"{row['p99_ms']:>7.0f} {row['overhead_p50_ms']:>11.1f}ms {row['overhead_p99_ms']:>11.1f}ms "
        f"{row['cpu_ms_per_turn']:>11.2f} {row['compaction_turns']:>16} {ratio:>23.2f} "
        f"{row['forced_compaction_turns']:>6} {fig.harness_busy:>7.0%} {label}",
        flush=True,
    )
    row["refused"] = fig.refused
    if fig.net_overheads:
        row["net_overhead_p50_ms"] = percentile(fig.net_overheads, 50) * 1000
        row["net_overhead_p99_ms"] = percentile(fig.net_overheads, 99) * 1000
        print(
            f"        overhead net of the model stub's own time: p50 {row['net_overhead_p50_ms']:.1f}ms, "
            f"p99 {row['net_overhead_p99_ms']:.1f}ms (the stub took p50 "
            f"{percentile(fig.model_stub_seconds, 50) * 1000:.1f}ms per chat request)",
            flush=True,
        )
    if fig.refused:
        print(f"        webhook posts refused (503) and sent again: {fig.refused}", flush=True)
    if fig.instructions:
        print(
            f"        worker instructions per turn (callgrind): {fig.instructions / fig.turns / 1e6:.2f} M", flush=True
        )
    for title, calls in (("redis commands", fig.redis_calls), ("bot api requests", fig.bot_api_calls)):
        per_turn = {name: count / fig.turns for name, count in sorted(calls.items(), key=lambda kv: -kv[1])}
        row[f"{title.replace(' ', '_')}_per_turn"] = per_turn
        detail = ", ".join(f"{name} {n:.2f}" for name, n in per_turn.items())
        print(f"        {title} per turn: {sum(per_turn.values()):.2f} ({detail})", flush=True)
    return row


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--chats", type=int, default=200, help="concurrent chats")
    parser.add_argument("--messages", type=int, default=8, help="messages per chat")
    parser.add_argument("--llm-latency", type=float, default=0.2)
    parser.add_argument("--think", type=float, default=2.0, help="seconds a customer waits after a reply")
    parser.add_argument("--budget", type=int, default=1000, help="small, so that compaction happens")
    parser.add_argument("--drafts", action="store_true", help="stream drafts (private chats)")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--json", default="", help="write the figures as JSON here")
    parser.add_argument("--plot", default="", help="write a PNG of latency percentiles per worker count here")
    parser.add_argument("--profile", action="store_true", help="sample the workers with py-spy, print a breakdown")
    parser.add_argument("--profile-dir", default="", help="keep py-spy's raw stacks here")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="run the workers under valgrind's callgrind and count their instructions per turn (repeatable "
        "whatever else the machine does; the workers run ~50x slower, so use few chats; with asyncio's event "
        "loop, as a worker under valgrind does not stop on SIGTERM with uvloop)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="a core of its own for each worker (taskset); this process and redis-server on the other cores",
    )
    parser.add_argument(
        "--variant", action="append", default=[], help="LABEL:KEY=VALUE,... extra worker environment (repeatable)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="alternate the variants this many times")
    return parser


def _print_header(args: argparse.Namespace) -> None:
    print(
        f"machine: {machine()}; chats={args.chats} messages={args.messages} "
        f"llm_latency={args.llm_latency * 1000:.0f}ms think={args.think}s budget={args.budget}"
        + (" pinned: a core per worker" if args.pin else "")
    )
    print(
        f"{'workers':>7} {'turns/s':>8} {'p50_ms':>7} {'p95_ms':>7} {'p99_ms':>7} {'overhead_p50':>12} "
        f"{'overhead_p99':>12} {'cpu_ms/turn':>11} {'compaction_turns':>16} {'compaction/ordinary_p50':>23} "
        f"{'forced':>6} {'harness':>7} variant"
    )


def _median_line(count: int, label: str, mine: list[dict[str, Any]], args: argparse.Namespace) -> str:
    return (
        f"  workers={count} {label}: cpu_ms/turn="
        f"{statistics.median(r['cpu_ms_per_turn'] for r in mine):.2f} turns/s="
        f"{statistics.median(r['turns_per_s'] for r in mine):.1f} overhead_p50="
        f"{statistics.median(r['overhead_p50_ms'] for r in mine):.1f}ms overhead_p99="
        f"{statistics.median(r['overhead_p99_ms'] for r in mine):.1f}ms"
        + (
            f" net_overhead_p50={statistics.median(r['net_overhead_p50_ms'] for r in mine):.1f}ms"
            f" net_overhead_p99={statistics.median(r['net_overhead_p99_ms'] for r in mine):.1f}ms"
            if all("net_overhead_p50_ms" in r for r in mine)
            else ""
        )
        + (
            f" instructions/turn={statistics.median(r['instructions_per_turn'] for r in mine) / 1e6:.2f}M"
            if args.callgrind
            else ""
        )
    )


def _all_runs(args: argparse.Namespace, variants: list[tuple[str, dict[str, str]]]) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="sb-load-") as workdir:
        for count in args.workers:
            for _ in range(args.repeat):
                for label, extra_env in variants:
                    fig = asyncio.run(one_run(args, count, Path(workdir), extra_env))
                    rows.append(summarize(fig, label, args))
                    if fig.profile is not None:
                        print("\n".join(fig.profile.report(rows[-1]["cpu_ms_per_turn"])), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.pin and args.callgrind:
        parser.error("--pin and --callgrind do not go together (callgrind counts instructions, not time)")
    if args.pin and max(args.workers) >= len(os.sched_getaffinity(0)):
        parser.error(f"--pin needs more cores than workers: {len(os.sched_getaffinity(0))} cores available")
    if args.profile_dir:
        Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    _print_header(args)
    variants = [parse_variant(v) for v in args.variant] or [("this", {})]
    rows = _all_runs(args, variants)
    if len(rows) > len(args.workers):
        print("median per worker count and variant:")
        for count in args.workers:
            for label, _ in variants:
                mine = [r for r in rows if r["workers"] == count and r["variant"] == label]
                print(_median_line(count, label, mine, args))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    if args.plot:
        plot(rows, args.plot, args)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
