from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis

from services.backends.redis.scripts import AnyRedis
from tests.conftest import flushed_cluster_client
from tests.e2e.processes import BotProcess


@pytest.fixture
async def processes() -> AsyncIterator[list[BotProcess]]:
    """Bot processes started by a test; any still running at the end are killed."""
    started: list[BotProcess] = []
    yield started
    for process in started:
        if process.process is not None and process.process.returncode is None:
            process.process.kill()
            await process.process.wait()


@dataclass
class SharedRedis:
    """What the workers share: one redis-server or the test run's Redis Cluster (flushed)."""

    mode: str
    url: str
    client: AnyRedis


@pytest.fixture(params=["single", "cluster"])
async def shared_redis(request: pytest.FixtureRequest) -> AsyncIterator[SharedRedis]:
    client: AnyRedis
    if request.param == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        url, client = cluster.url, await flushed_cluster_client(cluster)
    else:
        url = request.getfixturevalue("redis_server").url
        client = Redis.from_url(url)
        await client.flushdb()
    yield SharedRedis(request.param, url, client)
    await client.aclose()
