"""Dead-letter records on a real redis-server and on a Redis Cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from services.backends.redis.deadletters import DeadLetterStore
from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis
from tests.conftest import flushed_cluster_client

KEYS = KeySpace("d", "123456")


@pytest.fixture(params=["redis-server", "redis-cluster"])
async def dead(request: pytest.FixtureRequest) -> AsyncIterator[DeadLetterStore]:
    client: AnyRedis
    if request.param == "redis-cluster":
        client = await flushed_cluster_client(request.getfixturevalue("redis_cluster"))
    else:
        client = Redis.from_url(request.getfixturevalue("redis_server").url)
        await client.flushdb()
    yield DeadLetterStore(redis=client, keys=KEYS)
    await client.aclose()


async def add(dead: DeadLetterStore, chat_id: int, item_id: str) -> str:
    letter = await dead.add(
        chat_id=chat_id, item_id=item_id, order=int(item_id), payload='{"n":1}', error="boom", attempts=3, worker="w1"
    )
    return letter.id


async def test_add_list_get_drop(dead: DeadLetterStore) -> None:
    ids = [await add(dead, chat, str(n)) for n, chat in enumerate((1, 2, 1, 3))]
    assert await dead.count() == 4
    assert sorted(letter.id for letter in await dead.list()) == sorted(ids)
    found = await dead.get(ids[0])
    assert found is not None and found.payload == '{"n":1}' and found.attempts == 3
    assert await dead.drop(ids[1]) == 1
    assert await dead.get(ids[1]) is None and await dead.count() == 3


async def test_drop_chat_deletes_only_that_chat(dead: DeadLetterStore) -> None:
    for n, chat in enumerate((1, 2, 1, 3)):
        await add(dead, chat, str(n))
    await dead.drop_chat(1)
    assert sorted(letter.chat_id for letter in await dead.list()) == [2, 3]
