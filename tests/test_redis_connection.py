"""The connections ``redis_client()`` builds: each command's write is bounded without a task of its
own (redis-py's ``asyncio.wait_for`` made one per command on Python 3.11), on one server and on every
node of a cluster, and the bound still holds against a server that stops reading."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import signal
import time
from collections.abc import Coroutine, Generator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import TimeoutError as RedisTimeoutError

from services.backends.redis.connection import redis_client
from services.backends.redis.inline_write import TASK_PER_WRITE, inline_write_class
from services.backends.redis.scripts import AnyRedis
from tests.cluster import RedisClusterServers
from tests.conftest import RedisServer, flushed_cluster_client

CONNECTION = "InlineWriteConnection" if TASK_PER_WRITE else "Connection"
"""The class of the connections in use (redis-py's own where ``wait_for`` makes no task)."""


async def tasks_created_by(work: Coroutine[Any, Any, None]) -> int:
    """How many tasks the event loop creates while ``work`` runs."""
    loop = asyncio.get_running_loop()
    previous = loop.get_task_factory()
    created = 0

    def counting(loop: asyncio.AbstractEventLoop, coro: Generator[Any, None, Any], **kwargs: Any) -> asyncio.Task[Any]:
        nonlocal created
        created += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(counting)  # type: ignore[arg-type]
    try:
        await work
    finally:
        loop.set_task_factory(previous)
    return created


async def twenty_round_trips(client: AnyRedis) -> None:
    for n in range(10):
        await client.set(f"k{n}", n)
        assert await client.get(f"k{n}") == str(n).encode()


async def test_a_command_on_one_server_makes_no_task(redis_server: RedisServer) -> None:
    client = redis_client(redis_server.url, max_connections=2)
    try:
        await client.ping()  # connected, health checked
        assert await tasks_created_by(twenty_round_trips(client)) == 0
        connections = client.connection_pool._available_connections  # type: ignore[union-attr]
        assert connections
        assert all(type(c).__name__ == CONNECTION for c in connections)
    finally:
        await client.aclose()


async def test_a_command_on_a_cluster_makes_no_task(redis_cluster: RedisClusterServers) -> None:
    client = await flushed_cluster_client(redis_cluster)
    assert isinstance(client, RedisCluster)
    try:
        assert await tasks_created_by(twenty_round_trips(client)) == 0
        nodes = client.get_nodes()
        assert len(nodes) >= 3
        used = [c for node in nodes for c in node._connections]
        assert used
        assert all(type(c).__name__ == CONNECTION for c in used)
        # the start-up node too: it asks for the slot map at every re-discovery
        known = [*client.nodes_manager.startup_nodes.values(), *client.nodes_manager.nodes_cache.values()]
        assert {node.connection_class.__name__ for node in known} == {CONNECTION}
    finally:
        await client.aclose()


@pytest.fixture
def own_server() -> Generator[RedisServer, None, None]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGCONT)
        server.remove()


async def test_a_write_to_a_server_that_stopped_reading_times_out(own_server: RedisServer) -> None:
    """A stalled Redis (SIGSTOP) stops reading its socket: once the kernel's buffers are full a write
    waits. It fails after the command timeout, as redis-py's own write did, instead of hanging."""
    client = redis_client(own_server.url, max_connections=1, command_timeout=0.5)
    try:
        await client.ping()
        assert own_server.process is not None
        os.kill(own_server.process.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError, match="Timeout writing to socket"):
            # far more than the socket buffers hold; the outer bound only keeps a regression from hanging
            await asyncio.wait_for(client.set("big", b"x" * (64 << 20)), 30)
        assert time.monotonic() - started < 5
        os.kill(own_server.process.pid, signal.SIGCONT)
        assert await client.ping()  # the cut connection was dropped; a new one works
        # redis-py closes a timed-out connection after flushing what it had buffered, so the server
        # still gets that SET (a write that timed out may have happened, like any command that did);
        # waiting for it lets the old socket close before the test ends
        for _ in range(200):
            if await client.exists("big"):
                break
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()


def test_the_replaced_method_is_still_the_one_it_mirrors() -> None:
    """``inline_write`` copies redis-py 8.1's ``send_packed_command`` around the write; a redis-py
    release that changes it must be compared with the copy again (then this hash is updated)."""
    source = inspect.getsource(AbstractConnection.send_packed_command)
    assert hashlib.sha256(source.encode()).hexdigest() == (
        "baaeabd916209157db40455f034a0bac6fb3e2db902271313e0702bcbc678321"
    ), "redis-py's send_packed_command changed: re-check services/backends/redis/inline_write.py"


def test_each_connection_class_keeps_its_transport() -> None:
    """TLS and Unix-socket URLs keep their own class under the inline write (one class per kind)."""
    from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection

    for cls in (Connection, SSLConnection, UnixDomainSocketConnection):
        inline = inline_write_class(cls)
        assert issubclass(inline, cls)
        assert (inline is not cls) == TASK_PER_WRITE
        assert inline_write_class(cls) is inline
        assert inline_write_class(inline) is inline
    tls = redis_client("rediss://127.0.0.1:1/0")
    unix = redis_client("unix:///tmp/nothing.sock")
    assert issubclass(tls.connection_pool.connection_class, SSLConnection)  # type: ignore[union-attr]
    assert issubclass(unix.connection_pool.connection_class, UnixDomainSocketConnection)  # type: ignore[union-attr]
