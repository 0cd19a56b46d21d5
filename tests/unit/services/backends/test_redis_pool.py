"""``WaitingConnectionPool`` on a real redis-server: never more than ``max_connections``, commands
beyond them wait first come first served and fail after the pool's timeout, and a place is never
lost when a waiter is cancelled or a connection cannot be made."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from services.backends.redis.connection import redis_client
from services.backends.redis.pool import WaitingConnectionPool
from tests.conftest import RedisServer


def pool_of(client: Redis) -> WaitingConnectionPool:
    pool = client.connection_pool
    assert isinstance(pool, WaitingConnectionPool)
    return pool


def settled(pool: WaitingConnectionPool) -> bool:
    """Nobody waits, nothing is promised, no connection is in use."""
    return not pool._waiters and pool._granted == 0 and len(pool._in_use_connections) == 0


async def until_waiting(pool: WaitingConnectionPool, count: int) -> None:
    for _ in range(100):  # each waiter queues on its task's first step
        if len(pool._waiters) >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(pool._waiters)} waiters, expected {count}")


@pytest.fixture
async def small_pool(redis_server: RedisServer) -> AsyncIterator[WaitingConnectionPool]:
    pool = WaitingConnectionPool.from_url(redis_server.url, max_connections=1, timeout=2.0)
    yield pool
    await pool.aclose()


async def test_the_client_bounds_its_connections_and_every_command_beyond_waits(redis_server: RedisServer) -> None:
    client = redis_client(redis_server.url, max_connections=2)
    pool = pool_of(client)
    try:
        started = time.perf_counter()
        replies = await asyncio.gather(*(client.blpop([f"pool:empty:{n}"], timeout=0.05) for n in range(12)))
        elapsed = time.perf_counter() - started
        assert replies == [None] * 12
        assert len(pool._available_connections) + len(pool._in_use_connections) == 2
        assert elapsed >= 6 * 0.05  # two at a time
        assert settled(pool)
    finally:
        await client.aclose()


async def test_waiters_are_served_in_the_order_they_came(redis_server: RedisServer) -> None:
    client = redis_client(redis_server.url, max_connections=1)
    pool = pool_of(client)
    served: list[str] = []

    async def command(name: str) -> None:
        await client.ping()
        served.append(name)

    try:
        held = await pool.get_connection()
        waiters = []
        for n in range(5):
            waiters.append(asyncio.create_task(command(f"w{n}")))
            await until_waiting(pool, n + 1)
        await pool.release(held)
        await asyncio.gather(*waiters)
        assert served == ["w0", "w1", "w2", "w3", "w4"]
        assert settled(pool)
    finally:
        await client.aclose()


class SlowConnect(Connection):
    """Opening a connection takes until the test lets it finish (a TLS handshake to a distant server)."""

    finish = asyncio.Event()

    async def connect(self) -> None:
        if not self.is_connected:
            await self.finish.wait()
        await super().connect()


async def test_a_connection_being_opened_does_not_hold_a_second_place(redis_server: RedisServer) -> None:
    pool = WaitingConnectionPool(
        host="127.0.0.1", port=redis_server.port, max_connections=2, timeout=5.0, connection_class=SlowConnect
    )
    SlowConnect.finish = asyncio.Event()
    SlowConnect.finish.set()
    try:
        first = await pool.get_connection()
        SlowConnect.finish.clear()
        opening = asyncio.create_task(pool.get_connection())  # makes the second connection: held open
        await asyncio.sleep(0.05)
        await pool.release(first)
        again = await asyncio.wait_for(pool.get_connection(), 10)  # the idle first connection, at once
        assert not opening.done(), "the second connection is still being opened"
        SlowConnect.finish.set()
        assert again is first
        await pool.release(again)
        await pool.release(await opening)
        assert settled(pool)
    finally:
        await pool.aclose()


class RefusedConnect(Connection):
    async def connect(self) -> None:
        await asyncio.sleep(0.1)
        raise RedisConnectionError("connect failed (test)")


async def test_a_failed_connect_hands_its_place_to_the_next_waiter_at_once() -> None:
    pool = WaitingConnectionPool(
        host="127.0.0.1", port=1, max_connections=1, timeout=30.0, connection_class=RefusedConnect
    )
    try:
        started = time.perf_counter()
        outcomes = await asyncio.gather(pool.get_connection(), pool.get_connection(), return_exceptions=True)
        assert [str(o) for o in outcomes] == ["connect failed (test)"] * 2  # not "No connection available."
        assert time.perf_counter() - started < 15  # not the pool's 30 s timeout
        assert settled(pool)
    finally:
        await pool.aclose()


async def test_a_command_that_waits_past_the_timeout_fails_as_redis_py_s_blocking_pool_does(
    redis_server: RedisServer,
) -> None:
    pool = WaitingConnectionPool.from_url(redis_server.url, max_connections=1, timeout=0.2)
    client = Redis.from_pool(pool)
    try:
        holder = asyncio.create_task(client.blpop(["pool:empty:long"], timeout=60))  # until pushed below
        await asyncio.sleep(0.02)
        started = time.perf_counter()
        with pytest.raises(RedisConnectionError, match="No connection available"):
            await client.ping()
        assert 0.2 <= time.perf_counter() - started < 30  # the pool's timeout, not the holder's end
        assert not pool._waiters and pool._granted == 0
        async with Redis.from_url(redis_server.url) as other:
            await other.lpush("pool:empty:long", "x")
        await holder
        assert await client.ping() is True
        assert settled(pool)
    finally:
        await client.aclose()


async def test_a_woken_waiter_that_is_cancelled_passes_its_connection_on(small_pool: WaitingConnectionPool) -> None:
    held = await small_pool.get_connection()
    first = asyncio.create_task(small_pool.get_connection())
    second = asyncio.create_task(small_pool.get_connection())
    await until_waiting(small_pool, 2)
    await small_pool.release(held)  # wakes ``first``, which has not run yet
    first.cancel()
    connection = await asyncio.wait_for(second, 1.0)  # without the hand-over: the pool's 2 s timeout
    assert first.cancelled()
    await small_pool.release(connection)
    assert settled(small_pool)


async def test_a_waiter_cancelled_before_its_turn_leaves_the_queue(small_pool: WaitingConnectionPool) -> None:
    held = await small_pool.get_connection()
    first = asyncio.create_task(small_pool.get_connection())
    second = asyncio.create_task(small_pool.get_connection())
    await until_waiting(small_pool, 2)
    first.cancel()
    await asyncio.sleep(0)
    await small_pool.release(held)
    connection = await asyncio.wait_for(second, 1.0)
    assert first.cancelled()
    await small_pool.release(connection)
    assert settled(small_pool)


async def test_a_connection_that_cannot_be_made_gives_its_place_back() -> None:
    with socket.socket() as unheard:  # bound, never listening: connecting is refused
        unheard.bind(("127.0.0.1", 0))
        port = unheard.getsockname()[1]
        pool = WaitingConnectionPool.from_url(f"redis://127.0.0.1:{port}/0", max_connections=1, timeout=30.0)
        try:
            for _ in range(2):  # the second fails the same way at once: the first left no place taken
                started = time.perf_counter()
                with pytest.raises(RedisConnectionError, match="Error 111 connecting"):
                    await pool.get_connection()
                assert time.perf_counter() - started < 15  # not the pool's 30 s timeout
                assert settled(pool)
        finally:
            await pool.aclose()


def test_the_private_names_the_pool_uses_are_still_redis_py_s() -> None:
    """``WaitingConnectionPool`` reads ``ConnectionPool._lock`` and ``_in_use_connections``."""
    from redis.asyncio.connection import ConnectionPool

    pool = ConnectionPool()
    assert isinstance(pool._lock, asyncio.Lock)
    assert isinstance(pool._in_use_connections, set)
    assert callable(pool.get_available_connection)


async def test_redis_py_s_blocking_pool_still_loses_a_cancelled_waiter_s_wake_up(redis_server: RedisServer) -> None:
    """Why the bot has its own pool: the hand-over that ``test_a_woken_waiter_that_is_cancelled_passes_
    its_connection_on`` checks fails with redis-py's ``BlockingConnectionPool``: the next command waits
    out the timeout and fails while the connection is free. When this test fails, redis-py or Python
    fixed it: replace ``pool.py`` by theirs."""
    from redis.asyncio import BlockingConnectionPool

    pool = BlockingConnectionPool.from_url(redis_server.url, max_connections=1, timeout=0.5)
    try:
        held = await pool.get_connection()
        first = asyncio.create_task(pool.get_connection())
        second = asyncio.create_task(pool.get_connection())
        for _ in range(100):
            if len(pool._condition._waiters or ()) >= 2:  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0)
        await pool.release(held)
        first.cancel()
        with pytest.raises(RedisConnectionError, match="No connection available"):
            await second  # the one connection sat free all along
        assert first.cancelled() and len(pool._in_use_connections) == 0
    finally:
        await pool.aclose()
