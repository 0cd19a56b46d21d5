"""Which Redis client to build for ``REDIS_URL``: one server or a Redis Cluster (``REDIS_CLUSTER``).

``auto`` asks the server once at start-up (``INFO cluster``); ``on``/``off`` skip the question. A cluster
gets redis-py's ``RedisCluster``, which follows redirections and re-discovers the slot map after a
connection error or CLUSTERDOWN; what still fails becomes the transient ``StoreUnavailableError``,
retried by the caller. redis-py 8's maintenance notifications are off: with them its pool skipped the
check for a connection the server had closed, so after a Redis restart the first command on each
pooled connection failed.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.maint_notifications import MaintNotificationsConfig
from redis.utils import HIREDIS_AVAILABLE

from services.backends.redis.pool import WaitingConnectionPool
from services.backends.redis.scripts import AnyRedis, redis_errors

log = logging.getLogger(__name__)

ClusterMode = Literal["auto", "on", "off"]

_COMMON: dict[str, Any] = {
    # calls fail (and are retried by their callers) instead of hanging on a dead link
    "health_check_interval": 30,
    "socket_connect_timeout": 5,
    "socket_keepalive": True,
}


COMMAND_TIMEOUT_SECONDS = 15.0
"""How long one command's write, or the wait for its reply, may take before the call fails."""

POOL_WAIT_SECONDS = 10
"""How long a command waits for a free connection when all ``max_connections`` are busy."""


def redis_client(
    url: str,
    *,
    cluster: bool = False,
    max_connections: int = 512,
    command_timeout: float = COMMAND_TIMEOUT_SECONDS,
) -> AnyRedis:
    """A client for ``url``: any node of a cluster when ``cluster`` (the others are discovered).

    At most ``max_connections`` per server. On one server a command waits for a free connection
    (``WaitingConnectionPool``) rather than failing at once: redis-py's default pool refuses the
    101st concurrent command, which under a burst of webhook requests turned into 503s."""
    if cluster:
        client = RedisCluster.from_url(
            url,
            retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=5),
            max_connections=max_connections,
            socket_timeout=command_timeout,
            **_COMMON,
        )
        return client
    pool = WaitingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=POOL_WAIT_SECONDS,
        # with them on, the pool hands out connections the server has closed (see the module docstring)
        maint_notifications_config=MaintNotificationsConfig(enabled=False),
        socket_timeout=command_timeout,
        **_COMMON,
    )
    return Redis.from_pool(pool)  # the client owns the pool: closing it closes every connection


def reply_parser() -> str:
    """The parser redis-py reads replies with: "hiredis" (C, the ``fast`` extra, which the lock files
    install) whenever it is installed, else redis-py's own."""
    return "hiredis" if HIREDIS_AVAILABLE else "python"


async def is_cluster(url: str) -> bool:
    """One command to the server ``url`` names: is it a Redis Cluster node? (StoreUnavailableError if
    it cannot be reached.)"""
    probe = Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        with redis_errors("cannot ask Redis whether it is a cluster"):
            info = await probe.info("cluster")
    finally:
        await probe.aclose()
    return bool(int(info.get("cluster_enabled", 0)))


async def choose_cluster(url: str, mode: ClusterMode) -> bool:
    """Resolve ``REDIS_CLUSTER`` to cluster mode or not, and log the choice."""
    cluster = mode == "on" or (mode == "auto" and await is_cluster(url))
    how = "detected" if mode == "auto" else f"REDIS_CLUSTER={mode}"
    log.info("Redis mode: %s (%s), reply parser: %s", "cluster" if cluster else "single server", how, reply_parser())
    return cluster
