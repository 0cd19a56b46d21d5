"""Redis Cluster: mode detection, the single-slot rule (checked statically and at run time), scans and
blocking waits across nodes, and cluster failures surfacing as the transient store error."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import io
import logging
from pathlib import Path

import fakeredis
import pytest
from pydantic import ValidationError
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.exceptions import RedisClusterException

from bot.backends import open_redis_backend
from bot.cli import admin
from services.backends.redis.backend import RedisBackend
from services.backends.redis.connection import choose_cluster, is_cluster, redis_client, reply_parser
from services.backends.redis.deadletters import RedisDeadLetters
from services.backends.redis.keys import CHAT_KEY_NAMES, ChatKeys, KeySpace
from services.backends.redis.queue import RedisWorkQueue
from services.backends.redis.scripts import AnyRedis, CrossSlotError, redis_errors, register, slot_of
from services.backends.redis.store import RedisSessionStore
from services.core.errors import CorruptSessionError, StoreError, StoreUnavailableError
from services.settings import RedisSettings
from tests.cluster import RedisClusterServers
from tests.conftest import RedisServer, flushed_cluster_client, free_port
from tests.e2e.harness import make_settings

ROOT = Path(__file__).resolve().parents[4]
KEYS = KeySpace("c", "123456")


async def test_auto_detects_each_kind_of_server(
    redis_cluster: RedisClusterServers, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    assert await is_cluster(redis_cluster.url)
    assert not await is_cluster(redis_server.url)
    with caplog.at_level(logging.INFO, logger="services.backends.redis.connection"):
        assert await choose_cluster(redis_cluster.url, "auto")
        assert not await choose_cluster(redis_server.url, "auto")
        assert await choose_cluster(redis_server.url, "on")  # told, not asked
        assert not await choose_cluster(redis_cluster.url, "off")
    assert "Redis mode: cluster (detected)" in caplog.text
    assert "Redis mode: single server (detected)" in caplog.text


async def test_open_backend_builds_a_cluster_client_that_serves_the_session(
    redis_cluster: RedisClusterServers, cluster_redis: AnyRedis
) -> None:
    settings = make_settings("http://127.0.0.1:9", "http://127.0.0.1:9", redis_cluster.url)
    backend = await open_redis_backend(settings)
    try:
        assert backend.cluster
        await backend.ping()
        for chat in range(20):  # chats spread over the three masters
            await backend.store.commit_turn(chat, expected_version=0, messages=[])
        assert all([(await backend.store.load(chat)).version == 1 for chat in range(20)])
    finally:
        await backend.close()


async def test_an_unreachable_cluster_is_a_transient_store_error() -> None:
    client = redis_client(f"redis://127.0.0.1:{free_port()}/0", cluster=True)
    store = RedisSessionStore(redis=client, keys=KEYS)
    with pytest.raises(StoreUnavailableError):
        await store.ping()
    with pytest.raises(StoreUnavailableError):
        await store.load(1)
    await client.aclose()


def test_cluster_client_errors_are_classified() -> None:
    with pytest.raises(StoreUnavailableError), redis_errors("x"):
        raise RedisClusterException("Redis Cluster cannot be connected. Please provide at least one reachable node")
    with pytest.raises(CrossSlotError), redis_errors("x"):
        raise RedisClusterException("EVALSHA - all keys must map to the same key slot")


@pytest.mark.parametrize(
    "reply",
    [
        "CLUSTERDOWN The cluster is down",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "READONLY You can't write against a read only replica.",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "LOADING Redis is loading the dataset in memory",
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
        "NOREPLICAS Not enough good replicas to write.",
        "MOVED 3999 127.0.0.1:6381",
        "ASK 3999 127.0.0.1:6381",
    ],
)
def test_error_replies_after_which_a_retry_succeeds_are_transient(reply: str) -> None:
    """As redis-py raises them: its parser strips the code of the replies it knows (CLUSTERDOWN → a
    ClusterDownError reading "The cluster is down"), so the code is not in the message. A CLUSTERDOWN
    taken for a permanent error once sent updates to the dead letters during a failover."""
    with pytest.raises(StoreUnavailableError), redis_errors("x"):
        raise BaseParser.parse_error(reply)


def test_error_replies_that_are_bugs_or_damage_are_not_transient() -> None:
    with pytest.raises(CrossSlotError), redis_errors("x"):
        raise BaseParser.parse_error("CROSSSLOT Keys in request don't hash to the same slot")
    with pytest.raises(CorruptSessionError), redis_errors("x"):
        raise BaseParser.parse_error("WRONGTYPE Operation against a key holding the wrong kind of value")
    with pytest.raises(StoreError) as raised, redis_errors("x"):
        raise BaseParser.parse_error("ERR Error running script: attempt to compare nil with number")
    assert type(raised.value) is StoreError


async def test_a_redis_py_internal_error_during_a_fault_is_transient_but_ours_is_not() -> None:
    client = redis_client(f"redis://127.0.0.1:{free_port()}/0")
    connection = client.connection_pool.make_connection()
    with pytest.raises(StoreUnavailableError, match="writelines"), redis_errors("x"):
        await connection._send_packed_command([b"PING"])  # no writer: what a torn-down connection raises
    with pytest.raises(AttributeError), redis_errors("x"):
        None.missing  # type: ignore[attr-defined]  # noqa: B018
    await client.aclose()


def test_every_key_group_shares_one_slot() -> None:
    chat = KEYS.chat(42)
    keys = [getattr(chat, name) for name in CHAT_KEY_NAMES]
    assert len(set(keys)) == len(CHAT_KEY_NAMES) == len(ChatKeys.__dict__.keys() & set(CHAT_KEY_NAMES))
    assert all(key.endswith(f":{name}") for key, name in zip(keys, CHAT_KEY_NAMES, strict=True))
    assert len({slot_of(key) for key in keys}) == 1
    assert slot_of(KEYS.poller_leader) == slot_of(KEYS.poller_offset)
    assert slot_of(KEYS.dead_items) == slot_of(KEYS.dead_index)
    assert slot_of(KEYS.ready) == slot_of(KEYS.wake), "one script marks a chat due and wakes a worker"
    # chats spread: 1000 chats land on many slots
    assert len({slot_of(KEYS.chat(n).meta) for n in range(1000)}) > 900


@pytest.mark.parametrize("backend", ["fakeredis", "redis-cluster"])
async def test_a_cross_slot_script_is_refused_everywhere(backend: str, redis_cluster: RedisClusterServers) -> None:
    """The check runs on every script call, on one server too: a script given keys of two chats fails
    in every test that runs it, not only on a cluster."""
    client: AnyRedis = fakeredis.FakeAsyncRedis()
    if backend == "redis-cluster":
        client = await flushed_cluster_client(redis_cluster)
    script = register(client, "return redis.call('EXISTS', KEYS[1], KEYS[2])")
    assert int(await script(keys=[KEYS.chat(1).meta, KEYS.chat(1).msgs])) == 0
    with pytest.raises(CrossSlotError):
        await script(keys=[KEYS.chat(1).meta, KEYS.chat(2).meta])
    await client.aclose()


def _calls_outside_redisio() -> list[str]:
    """Every register_script / pipeline / transaction / eval call in the application code, except the
    one checked helper in services/backends/redis/scripts.py."""
    found = []
    banned = {"register_script", "pipeline", "transaction", "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall"}
    for package in ("bot", "services", "prompts", "eval"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() == "services/backends/redis/scripts.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in banned:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.func.attr}(")
    return found


def test_every_script_goes_through_the_single_slot_check() -> None:
    """Adding a Lua script or a MULTI transaction any other way than ``services.backends.redis.scripts.register``
    (which refuses keys of two slots on every call, so the whole suite exercises the rule) fails here."""
    assert _calls_outside_redisio() == []


async def test_wait_for_work_wakes_on_a_cluster(cluster_redis: AnyRedis) -> None:
    queue = RedisWorkQueue(redis=cluster_redis, keys=KEYS, lease_ms=1000)
    waiter = asyncio.create_task(queue.wait_for_work(5))
    await asyncio.sleep(0.1)
    started = asyncio.get_running_loop().time()
    await queue.enqueue(7, "u1", "hello", order=1)
    await asyncio.wait_for(waiter, 3)
    assert asyncio.get_running_loop().time() - started < 3


async def test_operator_commands_see_every_master(cluster_redis: AnyRedis) -> None:
    """SCAN on a cluster client walks every master: quarantined sessions on all three are listed."""
    backend = RedisBackend(redis=cluster_redis, keys=KEYS, ttl_seconds=0, per_minute=5, cluster=True)
    store = backend.store
    chats = list(range(1, 31))
    for chat in chats:
        await store.commit_turn(chat, expected_version=0, messages=[])
        await store.quarantine(chat, reason=f"broken {chat}")
    nodes = {cluster_redis.nodes_manager.get_node_from_slot(slot_of(KEYS.chat(c).q_info)).name for c in chats}  # type: ignore[union-attr]
    assert len(nodes) == 3
    out = io.StringIO()
    assert await admin.quarantine(backend, "list", None, out) == 0
    assert "30 quarantined session(s)" in out.getvalue()
    dead = RedisDeadLetters(redis=cluster_redis, keys=KEYS)
    await dead.add(chat_id=5, item_id="9", order=9, payload="{}", error="boom", attempts=3, worker="w")
    out = io.StringIO()
    assert await admin.dead_letters(backend, "list", None, out) == 0
    assert "1 dead letter(s)" in out.getvalue()


def test_the_same_client_fault_under_uvloop_is_transient_too(redis_server: RedisServer) -> None:
    """Under uvloop the torn-down connection of the client bug above raises RuntimeError from uvloop's
    own (Cython) frames; seen dead-lettering updates at intake during a master restart."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        client = Redis.from_url(redis_server.url)
        connection = client.connection_pool.make_connection()
        await connection.connect()
        connection._writer.transport.close()  # type: ignore[union-attr]
        await asyncio.sleep(0.01)
        with pytest.raises(StoreUnavailableError, match="RuntimeError"), redis_errors("x"):
            await connection._send_packed_command([b"PING"])
        with pytest.raises(RuntimeError), redis_errors("x"):
            raise RuntimeError("ours")
        await client.aclose()

    uvloop.run(main())


def test_a_braced_prefix_is_refused_before_any_key_is_built() -> None:
    """Braces in the namespace would split keys that must share a slot (ready set and wake list)."""
    with pytest.raises(ValueError, match="braces"):
        KeySpace("{sb}", "123")
    with pytest.raises(ValidationError):
        RedisSettings(_env_file=None, redis_key_prefix="sb{x}")  # type: ignore[call-arg]


async def test_a_burst_beyond_the_pool_waits_instead_of_failing(redis_server: RedisServer) -> None:
    """More concurrent commands than connections: each waits for a free one (redis-py's default pool
    would raise "Too many connections", which the webhook intake turned into 503s)."""
    client = redis_client(redis_server.url, max_connections=8)
    try:
        replies = await asyncio.gather(*(client.blpop([f"nothing:{n}"], timeout=0.2) for n in range(20)))
        assert replies == [None] * 20
    finally:
        await client.aclose()


@pytest.mark.redis
async def test_commands_after_a_redis_restart_reconnect_instead_of_failing() -> None:
    """Every pooled connection dies with the server; the first command on each used to fail with
    "Connection closed by server" (a transient error per connection: a turn retried, the customer told
    the answer will come). The pool now notices the close when it hands a connection out and
    reconnects before sending, so nothing is sent twice (the client retries nothing on one server)."""
    server = RedisServer()
    server.start()
    client = redis_client(server.url, max_connections=8)
    try:
        await asyncio.gather(*(client.blpop([f"warm:{n}"], timeout=0.05) for n in range(8)))  # 8 connections
        await client.set("kept", "no: this server keeps nothing")
        # in threads: the event loop runs meanwhile, as a worker's does, and reads the server's close
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)  # same port, empty
        replies = await asyncio.gather(*(client.get("kept") for _ in range(8)))
        assert replies == [None] * 8
        assert await client.set("after", "1")
    finally:
        await client.aclose()
        server.remove()


async def test_the_client_reads_replies_with_hiredis_when_installed(redis_server: RedisServer) -> None:
    """The lock files install hiredis (the ``fast`` extra): the connections redis_client() builds parse
    with it, and the start-up log says which parser is in use."""
    from redis._parsers import _AsyncHiredisParser

    client = redis_client(redis_server.url, max_connections=2)
    try:
        assert await client.ping()
        parsers = {type(connection._parser) for connection in client.connection_pool._available_connections}  # type: ignore[union-attr]
    finally:
        await client.aclose()
    installed = importlib.util.find_spec("hiredis") is not None
    assert (_AsyncHiredisParser in parsers) == installed
    assert reply_parser() == ("hiredis" if installed else "python")
