"""``benchmarks/chaos.py --cluster``: the chaos scenario on a real 3-master Redis Cluster.

``ChaosCluster`` has the shape of ``tests.conftest.RedisServer`` that the chaos run drives: ``start()``
brings the cluster up (the first time) or the stopped master back; ``stop()`` SIGKILLs the master
serving the ready set (no replicas: the whole cluster reports CLUSTERDOWN until it returns), so the
chaos run's "Redis restart" becomes a master restart. ``close()`` removes everything.
"""

from __future__ import annotations

from services.backends.redis.connection import redis_client
from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis
from tests.cluster import ClusterNode, RedisClusterServers
from tests.conftest import RedisServer


class ChaosCluster:
    def __init__(self, keys: KeySpace) -> None:
        self.servers = RedisClusterServers()
        self.url = self.servers.url
        self._keys = keys
        self._stopped: ClusterNode | None = None
        self._up = False

    def start(self) -> None:
        if not self._up:
            self.servers.start()
            self._up = True
            print(f"redis cluster: 3 masters up in {self.servers.startup_seconds:.1f}s")
        elif self._stopped is not None:
            self._stopped.start()
            self._stopped = None
        self.servers.wait_ok()

    def stop(self) -> None:
        self._stopped = self.servers.node_for(self._keys.ready)
        self._stopped.kill()

    def close(self) -> None:
        self.servers.stop()

    def commands_per_master(self) -> list[int]:
        """Commands each master has processed so far (how evenly the cluster is loaded)."""
        import redis

        return [
            int(redis.Redis(host="127.0.0.1", port=node.port).info("stats")["total_commands_processed"])
            for node in self.servers.nodes
        ]


def make_store(cluster: bool, keys: KeySpace) -> RedisServer | ChaosCluster:
    return ChaosCluster(keys) if cluster else RedisServer(appendonly=True)


def client_for(store: RedisServer | ChaosCluster) -> AnyRedis:
    return redis_client(store.url, cluster=isinstance(store, ChaosCluster))


def shutdown(store: RedisServer | ChaosCluster) -> None:
    if isinstance(store, ChaosCluster):
        print(f"commands per master: {store.commands_per_master()}")
        store.close()
    else:
        store.stop()
