"""Several workers on one host, without Docker (docs/deployment.md): three real ``python -m bot`` queue
workers given the same METRICS_PORT all start, each serving /metrics and /readyz on its own port (the
first free one from METRICS_PORT up), and each says which in its log."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from redis.asyncio import Redis

from tests.conftest import RedisServer, free_port
from tests.e2e.processes import BotProcess, base_env
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

SERVING = re.compile(r"metrics and health on 127\.0\.0\.1:(\d+) ")


async def test_three_workers_with_one_metrics_port_all_start(
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
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(port),
        "LOG_LEVEL": "INFO",
    }
    workers = [BotProcess(env, tmp_path) for _ in range(3)]
    processes.extend(workers)
    await asyncio.gather(*(worker.start() for worker in workers))
    await asyncio.gather(*(worker.wait_log("metrics and health on", within=180) for worker in workers))
    ports = []
    for worker in workers:
        found = SERVING.search(worker.log.decode(errors="replace"))
        assert found is not None, worker.log.decode(errors="replace")
        ports.append(int(found.group(1)))
    assert len(set(ports)) == 3 and port in ports and all(port <= other < port + 10 for other in ports), ports
    await asyncio.gather(
        *(worker.wait_http_ok(f"http://127.0.0.1:{other}/readyz") for worker, other in zip(workers, ports, strict=True))
    )
    moved = [worker for worker, other in zip(workers, ports, strict=True) if other != port]
    assert all(f"METRICS_PORT {port} is in use" in worker.log.decode(errors="replace") for worker in moved)
    assert [await worker.stop() for worker in workers] == [0, 0, 0]
