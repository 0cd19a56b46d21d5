"""Shared fixtures: token counter, a real redis-server on a free loopback port, stores, stub LLM."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fakeredis
import pytest
import redis
from aiogram import Bot
from redis.asyncio import Redis

from services.backends.memory import InMemoryBackend
from services.backends.redis.backend import RedisBackend
from services.backends.redis.connection import redis_client
from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis
from services.core.tokens import TokenCounter
from services.llm.client import LLMClient
from services.ports.backend import Backend, QueuedBackend
from services.ports.sessions import SessionStore
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

if TYPE_CHECKING:
    from tests.cluster import RedisClusterServers


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    return TokenCounter.for_encoding("o200k_base")


def pytest_configure(config: pytest.Config) -> None:
    # scripts/test stops its background pytest pass with SIGTERM: it ends as on Ctrl-C, tearing down
    # its fixtures (the redis-servers it started) instead of leaving them running
    signal.signal(signal.SIGTERM, _interrupted)
    subprocess.Popen.__init__ = _popen_checked  # type: ignore[method-assign]


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


_popen_init = subprocess.Popen.__init__
UNMARKED = {"redis-server", "services.knowledge.sandbox"}
"""Started without the ``slow`` marker: a redis-server (once a run, or a test's own, marked ``redis``)
and the knowledge sandbox's child (services/knowledge/sandbox.py: one, kept between documents)."""


def _popen_checked(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
    """``subprocess.Popen`` (asyncio's subprocesses too) refusing, in a test not marked ``slow``, any
    program but the UNMARKED ones: ``-m "not slow"`` really starts no bot, nginx or node."""
    words = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
    program = os.fsdecode(words[0]) if words else ""
    if not {os.path.basename(program), *map(str, words[1:4])} & UNMARKED:
        require_marker("slow", f"starts {program!r}")
    _popen_init(self, args, *rest, **options)


REDIS_FIXTURES = {"redis_server", "real_redis", "own_server"}
CLUSTER_FIXTURES = {"redis_cluster", "cluster_redis", "own_cluster"}
REDIS_PARAMS = {"redis-server", "redis", "single"}  # the parameters of backend, shared_redis, ... that start one
CLUSTER_PARAMS = {"redis-cluster", "cluster"}
E2E_DIR = Path(__file__).parent / "e2e"
SLOW_DIRS = tuple(Path(__file__).parent / name for name in ("e2e", "deploy", "benchmarks"))
"""Every test in these starts processes (bots, nginx, prometheus) or a cluster: marked ``slow``."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test ``e2e`` (under tests/e2e), ``cluster`` and ``redis`` from the fixtures and fixture
    parameters it uses (a module that starts its own servers sets ``pytestmark``), and ``slow`` under
    SLOW_DIRS and with a cluster (a test elsewhere starting a process says ``@pytest.mark.slow``)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        params = {value for value in callspec.params.values() if isinstance(value, str)} if callspec else set()
        if E2E_DIR in item.path.parents:
            item.add_marker(pytest.mark.e2e)
        cluster = bool(names & CLUSTER_FIXTURES or params & CLUSTER_PARAMS)
        if cluster and item.get_closest_marker("cluster") is None:
            item.add_marker(pytest.mark.cluster)
        if (cluster or names & REDIS_FIXTURES or params & REDIS_PARAMS) and item.get_closest_marker("redis") is None:
            item.add_marker(pytest.mark.redis)
        slow = cluster or any(folder in item.path.parents for folder in SLOW_DIRS)
        if slow and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


_running: list[pytest.Item] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def require_marker(name: str, what: str = "starts a redis-server") -> None:
    """Called where a redis-server (or another process) is started: the test doing it must carry the
    marker ``name``, so ``-m "not redis"`` / ``-m "not cluster"`` / ``-m "not slow"`` runs without one."""
    if _running and _running[-1].get_closest_marker(name) is None:
        raise RuntimeError(f"{_running[-1].nodeid} {what} but is not marked {name!r}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisExitedError(RuntimeError):
    """redis-server exited while starting (e.g. its port was taken)."""


def answers_as(process: subprocess.Popen[bytes], port: int, within: float = 10) -> bool:
    """Wait until the redis-server ``process`` itself answers on ``port`` (not another process there):
    True; False if it exits first (e.g. its port was taken). One that never answers is killed."""
    deadline = time.monotonic() + within
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=2) as client:
        while process.poll() is None:
            try:
                if int(client.info("server")["process_id"]) == process.pid:
                    return True
            except redis.RedisError:  # not up yet, or another kind of server on the port
                pass
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise RuntimeError(f"redis-server on port {port} did not answer within {within:g} s")
            time.sleep(0.02)
    return False


class RedisServer:
    """A real redis-server process on loopback, for the tests that must talk to the real thing."""

    def __init__(self, *, appendonly: bool = False, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/test installs it)")
        self.dir = Path(tempfile.mkdtemp(prefix="sb-redis-"))
        self._binary = binary
        self._port_chosen_here = port is None
        self._started = False
        self._use_port(port or free_port())
        self._appendonly = appendonly
        self.process: subprocess.Popen[bytes] | None = None

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"

    def _args(self) -> list[str]:
        return [
            self._binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if self._appendonly else "no",
            "--dir",
            str(self.dir),
        ]

    def start(self) -> None:
        """Start the server and wait until it answers. A free port chosen here can be taken by another
        process before redis-server binds it: the first start then moves to another free port (a
        restart keeps its port: clients and data are bound to it)."""
        require_marker("redis")
        for _ in range(5):
            self.process = subprocess.Popen(self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if answers_as(self.process, self.port):
                self._started = True
                return
            if self._started or not self._port_chosen_here:
                raise RedisExitedError(f"redis-server on port {self.port} exited with {self.process.returncode}")
            self._use_port(free_port())
        raise RuntimeError("redis-server found no free port in 5 tries")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def remove(self) -> None:
        """Stop it (if running) and delete its directory: a server a test started for itself."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """One real 3-master Redis Cluster for the whole test run (start-up takes a few seconds)."""
    from tests.cluster import RedisClusterServers

    cluster = RedisClusterServers()
    try:
        cluster.start()
        print(f"\nRedis Cluster (3 masters) up in {cluster.startup_seconds:.2f}s")
        yield cluster
    finally:
        cluster.stop()


async def flushed_cluster_client(cluster: RedisClusterServers) -> AnyRedis:
    """A cluster client (as the bot builds it) on ``cluster``, every master flushed."""
    cluster.wait_ok()  # a test may have restarted a master
    client = redis_client(cluster.url, cluster=True)
    await client.flushall()
    return client


@pytest.fixture
async def cluster_redis(redis_cluster: RedisClusterServers) -> AsyncIterator[AnyRedis]:
    client = await flushed_cluster_client(redis_cluster)
    yield client
    await client.aclose()


@pytest.fixture
async def real_redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url)
    await client.flushdb()
    yield client
    await client.aclose()


BACKENDS = ["memory", "fakeredis", "redis-server", "redis-cluster"]
"""Every backend the contract suites run over; a new backend adds its name here and a branch in
``open_backend_for_test``."""
QUEUED_BACKENDS = ["fakeredis", "redis-server", "redis-cluster"]
"""The backends several processes can share (queue, dead letters, polling lease)."""
TEST_KEYS = KeySpace("test", "123456")


async def open_backend_for_test(name: str, request: pytest.FixtureRequest) -> Backend:
    """An empty backend ``name`` with a 3600 s TTL and a limit of 2 messages a minute."""
    client: AnyRedis
    if name == "memory":
        return InMemoryBackend(ttl_seconds=3600, per_minute=2)
    if name == "fakeredis":
        client = fakeredis.FakeAsyncRedis()
    elif name == "redis-cluster":
        client = await flushed_cluster_client(request.getfixturevalue("redis_cluster"))
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        client = Redis.from_url(server.url)
        await client.flushdb()
    return RedisBackend(redis=client, keys=TEST_KEYS, ttl_seconds=3600, per_minute=2, cluster=name == "redis-cluster")


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """Each backend in turn (the store and backend contracts run over all of them)."""
    opened = await open_backend_for_test(request.param, request)
    yield opened
    await opened.close()


@pytest.fixture(params=QUEUED_BACKENDS)
async def queued_backend(request: pytest.FixtureRequest) -> AsyncIterator[QueuedBackend]:
    """Each shared backend in turn (the queue and dead-letter suites run over all of them)."""
    opened = await open_backend_for_test(request.param, request)
    assert isinstance(opened, RedisBackend)  # the one queued backend today
    yield opened
    await opened.close()


@pytest.fixture
def store(backend: Backend) -> SessionStore:
    """The session store of each backend (the store contract runs over all of them)."""
    return backend.store


@pytest.fixture
def shown(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Callable[[str], None]:
    """Shows a line that is part of what a test shows, pass or fail: printed at once (capture off) or,
    in a pytest-xdist worker (whose output is not shown), after the run (pytest_terminal_summary)."""

    def show(text: str) -> None:
        if hasattr(request.config, "workerinput"):
            request.node.user_properties.append(("shown", text))
        else:
            with capsys.disabled():
                print(text)

    return show


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = [
        str(value)
        for report in terminalreporter.getreports("")
        if getattr(report, "when", None) == "teardown"
        for name, value in getattr(report, "user_properties", ())
        if name == "shown"
    ]
    if lines:
        terminalreporter.section("shown by the tests")
        for line in lines:
            terminalreporter.write_line(line.strip("\n"))


@pytest.fixture
async def telegram() -> AsyncIterator[StubTelegram]:
    """A stub Telegram Bot API server on loopback."""
    stub = StubTelegram()
    await stub.start()
    yield stub
    await stub.stop()


@pytest.fixture
async def bot() -> AsyncIterator[Bot]:
    """An aiogram Bot that is never meant to reach Telegram (the worker tests' dispatcher needs one)."""
    bot = Bot("123456:TEST")
    yield bot
    await bot.session.close()


@pytest.fixture
async def stub_llm() -> AsyncIterator[StubOpenAI]:
    stub = StubOpenAI()
    await stub.start()
    yield stub
    await stub.stop()


@pytest.fixture
async def llm(stub_llm: StubOpenAI) -> AsyncIterator[LLMClient]:
    from openai import AsyncOpenAI

    client = LLMClient(
        client=AsyncOpenAI(api_key="test-key", base_url=stub_llm.base_url, max_retries=0, timeout=10),
        chat_model="stub-chat",
        summary_model="stub-summary",
        max_output_tokens=512,
        summary_max_tokens=400,
    )
    yield client
    await client.close()
