"""What one Redis command costs the client, by connection pool, on one real redis-server: the bot's
``WaitingConnectionPool`` against redis-py's ``BlockingConnectionPool`` configured as the bot had it,
and the bot's pool with redis-py's own connection class (writes bounded by ``asyncio.wait_for``).

    .venv/bin/python -m benchmarks.redis_pool                 # CPU µs per command, variants alternating
    .venv/bin/python -m benchmarks.redis_pool --callgrind     # instructions per command (valgrind)

32 tasks send GETs concurrently, as a loaded worker's chats do. ``--loop asyncio``: asyncio's loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop
from redis.asyncio import BlockingConnectionPool, Redis
from redis.maint_notifications import MaintNotificationsConfig

from benchmarks.common import machine
from services.backends.redis import connection
from tests.conftest import RedisServer

VARIANTS = ("blocking", "waiting")
TASKS = 32


def client_for(variant: str, url: str) -> Redis:
    if variant == "waiting":
        client = connection.redis_client(url)
        assert isinstance(client, Redis)
        return client
    pool = BlockingConnectionPool.from_url(  # redis_client() before WaitingConnectionPool
        url,
        max_connections=512,
        timeout=connection.POOL_WAIT_SECONDS,
        maint_notifications_config=MaintNotificationsConfig(enabled=False),
        socket_timeout=connection.COMMAND_TIMEOUT_SECONDS,
        **connection._COMMON,
    )
    return Redis.from_pool(pool)


async def commands(variant: str, url: str, count: int) -> float:
    """CPU seconds of ``count`` GETs from ``TASKS`` concurrent tasks (connections made beforehand)."""
    client = client_for(variant, url)

    async def gets(n: int) -> None:
        for _ in range(n):
            await client.get("bench:key")

    try:
        await client.set("bench:key", "x" * 64)
        await asyncio.gather(*(gets(20) for _ in range(TASKS)))  # every connection made and checked
        started = time.process_time()
        await asyncio.gather(*(gets(count // TASKS) for _ in range(TASKS)))
        return time.process_time() - started
    finally:
        await client.aclose()


def run_loop(loop: str, coroutine: object) -> float:
    runner = uvloop.run if loop == "uvloop" else asyncio.run
    return runner(coroutine)  # type: ignore[no-any-return, arg-type]


def instructions(variant: str, url: str, count: int, loop: str) -> int:
    with tempfile.TemporaryDirectory() as workdir:
        out = Path(workdir) / "callgrind.out"
        command = [sys.executable, "-m", "benchmarks.redis_pool", "--one", variant, "--url", url]
        command += ["--count", str(count), "--loop", loop]
        result = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command],
            capture_output=True,
            text=True,
            check=True,
        )
    match = re.search(r"Collected : (\d+)", result.stderr) or re.search(r"refs:\s+([\d,]+)", result.stderr)
    assert match, result.stderr[-2000:]
    return int(match.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=32_000, help="commands per measurement")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--callgrind", action="store_true", help="count instructions with valgrind")
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child run under valgrind
        run_loop(args.loop, commands(args.one, args.url, args.count))
        return
    server = RedisServer()
    server.start()
    try:
        print(f"machine: {machine()}; event loop {args.loop}; {TASKS} concurrent tasks, GET of 64 bytes")
        if args.callgrind:
            count = min(args.count, 6_400)
            for variant in VARIANTS:
                per_command = (
                    instructions(variant, server.url, count, args.loop)
                    - instructions(variant, server.url, 0, args.loop)
                ) / count
                print(f"  {variant:17s} {per_command / 1000:7.1f} k instructions per command")
            return
        seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        for _ in range(args.repeat):
            for variant in VARIANTS:
                seconds[variant].append(run_loop(args.loop, commands(variant, server.url, args.count)))
        for variant, runs in seconds.items():
            per = [s / args.count * 1e6 for s in runs]
            each = ", ".join(f"{p:.1f}" for p in per)
            print(f"  {variant:17s} CPU µs per command: median {statistics.median(per):5.1f} (runs {each})")
    finally:
        server.remove()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
