"""The connections ``redis_client()`` builds: redis-py's own classes, on one server and on every node
of a cluster, and each command's write bound holds against a server that stops reading."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Generator

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import TimeoutError as RedisTimeoutError

from services.backends.redis.connection import redis_client
from services.backends.redis.scripts import AnyRedis
from tests.cluster import RedisClusterServers
from tests.conftest import RedisServer, flushed_cluster_client

CONNECTION = "Connection"
"""redis-py's own connection class: the bot replaces none of its methods."""


async def twenty_round_trips(client: AnyRedis) -> None:
    for n in range(10):
        await client.set(f"k{n}", n)
        assert await client.get(f"k{n}") == str(n).encode()


async def test_commands_on_one_server_use_redis_py_s_own_connections(redis_server: RedisServer) -> None:
    client = redis_client(redis_server.url, max_connections=2)
    try:
        await client.ping()  # connected, health checked
        await twenty_round_trips(client)
        connections = client.connection_pool._available_connections  # type: ignore[union-attr]
        assert connections
        assert all(type(c).__name__ == CONNECTION for c in connections)
    finally:
        await client.aclose()


async def test_commands_on_a_cluster_use_redis_py_s_own_connections(redis_cluster: RedisClusterServers) -> None:
    client = await flushed_cluster_client(redis_cluster)
    assert isinstance(client, RedisCluster)
    try:
        await twenty_round_trips(client)
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
        # waiting for it lets the old socket close before the test ends (on a client without the 0.5 s
        # timeout: a busy machine's server can take longer over the 64 MB)
        patient = redis_client(own_server.url)
        try:
            for _ in range(200):
                if await patient.exists("big"):
                    break
                await asyncio.sleep(0.05)
        finally:
            await patient.aclose()
    finally:
        await client.aclose()


def test_each_connection_class_keeps_its_transport() -> None:
    """TLS and Unix-socket URLs get redis-py's class for their transport."""
    from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection

    tls = redis_client("rediss://127.0.0.1:1/0")
    unix = redis_client("unix:///tmp/nothing.sock")
    assert issubclass(tls.connection_pool.connection_class, SSLConnection)  # type: ignore[union-attr]
    assert issubclass(unix.connection_pool.connection_class, UnixDomainSocketConnection)  # type: ignore[union-attr]
