"""A real Redis Cluster on loopback (3 masters, no replicas) for the tests and the chaos benchmark.

Every node runs with ``appendonly yes`` so that a master killed with SIGKILL and started again on the
same port, directory and ``nodes.conf`` comes back with its data and its slots (without replicas its
slots are down until it returns; that is the failure the tests inject).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.conftest import answers_as, free_port, require_marker

NODE_TIMEOUT_MS = 2000


class ClusterNode:
    """One ``redis-server --cluster-enabled yes`` process."""

    def __init__(self, root: Path, port: int) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/test installs it)")
        self._binary = binary
        self._root = root
        self._started = False
        self._use_port(port)
        self.process: subprocess.Popen[bytes] | None = None

    def _use_port(self, port: int) -> None:
        self.port = port
        self.dir = self._root / str(port)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._args = [
            self._binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            str(free_port()),  # the default (port + 10000) can be past 65535
            "--cluster-config-file",
            str(self.dir / "nodes.conf"),
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--dir",
            str(self.dir),
        ]

    def start(self) -> None:
        """Start the node and wait until it answers. On its first start, a port taken by another process
        since it was chosen moves the node to other free ports (a restart keeps them: the cluster knows
        the node by its address)."""
        require_marker("cluster")
        for _ in range(5):
            self.process = subprocess.Popen(self._args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if answers_as(self.process, self.port):
                self._started = True
                return
            if self._started:
                raise RuntimeError(f"redis-server on port {self.port} exited with {self.process.returncode}")
            self._use_port(free_port())
        raise RuntimeError("a cluster node found no free port in 5 tries")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final write (the append-only file has every acknowledged write)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


class RedisClusterServers:
    """Three masters joined with ``redis-cli --cluster create``; ``url`` names the first node (any node
    works: the client discovers the others)."""

    def __init__(self, masters: int = 3) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sb-cluster-"))
        self.nodes = [ClusterNode(self.root, free_port()) for _ in range(masters)]
        self.startup_seconds = 0.0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> None:
        started = time.monotonic()
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed (it comes with redis-server)")
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        self.wait_ok()
        self.startup_seconds = time.monotonic() - started

    def wait_ok(self, within: float = 30) -> None:
        """Until every node reports ``cluster_state:ok`` and agrees that all 16384 slots are served."""

        def healthy() -> bool:
            for node in self.nodes:
                info = redis.Redis(host="127.0.0.1", port=node.port).cluster("info")
                if info.get("cluster_state") != "ok" or str(info.get("cluster_slots_ok")) != "16384":
                    return False
            return True

        _wait(healthy, what="cluster_state:ok on every node", within=within)

    def node_for(self, key: str) -> ClusterNode:
        """The master serving ``key``'s hash slot."""
        slot = int(key_slot(key.encode()))
        for node in self.nodes:
            for start, end, *_ in redis.Redis(host="127.0.0.1", port=node.port).execute_command("CLUSTER SLOTS"):
                if int(start) <= slot <= int(end):
                    return next(n for n in self.nodes if n.port == int(_[0][1]))
        raise LookupError(f"no master serves slot {slot}")

    def state_seen_by_others(self, down: ClusterNode) -> set[str]:
        """``cluster_state`` as the nodes other than ``down`` report it."""
        states = set()
        for node in self.nodes:
            if node is not down:
                states.add(str(redis.Redis(host="127.0.0.1", port=node.port).cluster("info").get("cluster_state")))
        return states

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _wait(check: object, *, what: str, within: float = 10) -> None:
    deadline = time.monotonic() + within
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except (redis.ConnectionError, redis.ResponseError) as exc:
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"waited {within}s for {what} (last error: {last})")
