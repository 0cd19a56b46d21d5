"""Which backend a process runs on, from the settings: Redis (one server or a Cluster, resolved with
start-up retries) with ``REDIS_URL``, else the in-process one. The composition root
(``bot.factory.build_app``) and the operator commands open it here; nothing else looks at a backend's
concrete type."""

from __future__ import annotations

import logging

from bot.serving.startup import with_startup_retries
from bot.settings import Settings
from services.backends.memory import InMemoryBackend
from services.backends.redis.backend import RedisBackend
from services.backends.redis.connection import choose_cluster, redis_client
from services.backends.redis.keys import KeySpace, bot_id_of
from services.core.errors import ConfigurationError
from services.ports.backend import QueuedBackend

log = logging.getLogger(__name__)


def key_space(settings: Settings) -> KeySpace:
    """Every key of this bot lives under ``<REDIS_KEY_PREFIX>:<bot id>``."""
    return KeySpace(settings.redis.redis_key_prefix, bot_id_of(settings.bot.bot_token.get_secret_value()))


async def open_backend(settings: Settings, *, offline: bool = False) -> InMemoryBackend | RedisBackend:
    """``build_backend`` after resolving ``REDIS_CLUSTER`` (``auto`` asks the server once, retrying
    while it cannot be reached; StartupError if it never answers)."""
    if settings.redis.redis_url is None:
        return build_backend(settings, offline=offline)
    url = settings.redis.redis_url.get_secret_value()
    mode = settings.redis.redis_cluster
    cluster = await with_startup_retries("connecting to Redis", lambda: choose_cluster(url, mode))
    return build_backend(settings, cluster=cluster)


async def open_redis_backend(settings: Settings) -> QueuedBackend:
    """The shared backend queued mode and the operator commands need (ConfigurationError without
    ``REDIS_URL``)."""
    backend = await open_backend(settings)
    if not isinstance(backend, RedisBackend):
        await backend.close()
        raise ConfigurationError("this needs REDIS_URL (the in-process mode keeps no queue or dead letters)")
    return backend


def build_backend(
    settings: Settings, *, cluster: bool = False, offline: bool = False
) -> InMemoryBackend | RedisBackend:
    """Redis with ``REDIS_URL`` (one client; a cluster client if ``cluster``), else the in-process one.
    ``offline``: a terminal command (console, knowledge), for which in-process is no warning."""
    ttl = settings.memory.session_ttl_seconds
    per_minute = settings.bot.rate_limit_per_minute
    if settings.redis.redis_url is None:
        if offline:
            log.debug("REDIS_URL is unset: sessions and caches in this process only")
            return InMemoryBackend(ttl_seconds=ttl, per_minute=per_minute)
        log.warning(
            "REDIS_URL is unset: using the in-process session store (one process only; sessions are "
            "lost on restart). Set REDIS_URL for production and for more than one worker."
        )
        return InMemoryBackend(ttl_seconds=ttl, per_minute=per_minute)
    keys = key_space(settings)
    client = redis_client(
        settings.redis.redis_url.get_secret_value(),
        cluster=cluster,
        max_connections=settings.redis.redis_max_connections,
    )
    log.info("session store: Redis%s (keys under %r)", " Cluster" if cluster else "", keys.namespace)
    return RedisBackend(redis=client, keys=keys, ttl_seconds=ttl, per_minute=per_minute, cluster=cluster)
