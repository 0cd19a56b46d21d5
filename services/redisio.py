"""What every Redis-backed component shares: Lua snippets and the translation of redis-py's errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import RedisError, ResponseError

from services.errors import CorruptSessionError, StoreError, StoreUnavailableError

LUA_NOW = "local t = redis.call('TIME'); local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
"""Defines ``now``: the Redis server's clock in milliseconds (one clock for every worker)."""

LUA_FENCE = """
local function holds(lease_key, token)
  return token == '' or redis.call('GET', lease_key) == token
end
"""
"""Defines ``holds(lease_key, token)``: the fencing check every per-chat write of a worker starts with
(an empty token means: not written on behalf of a lease, e.g. the single-process mode)."""

FENCE_LOST = -2
"""What a fenced script returns when the caller no longer holds the chat's lease."""


_TRANSIENT_REPLIES = frozenset(
    {"BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "MOVED", "ASK", "NOREPLICAS", "OOM"}
)
"""Error replies after which the same command succeeds later (failover, loading, memory freed)."""


@contextmanager
def redis_errors(action: str) -> Iterator[None]:
    """Translate redis-py's errors: connection trouble and transient error replies become the engine's
    transient StoreUnavailableError; a key of the wrong type is a damaged record (CorruptSessionError);
    any other error reply (a script bug) is a permanent StoreError, never retried forever."""
    try:
        yield
    except ResponseError as exc:
        code = str(exc).split(" ", 1)[0].upper()
        if code in _TRANSIENT_REPLIES:
            raise StoreUnavailableError(f"{action}: {exc}") from exc
        if code == "WRONGTYPE" or "WRONGTYPE" in str(exc):
            raise CorruptSessionError(f"{action}: a key holds the wrong type: {exc}") from exc
        raise StoreError(f"{action}: {type(exc).__name__}: {exc}") from exc
    except RedisError as exc:
        raise StoreUnavailableError(f"{action}: {type(exc).__name__}: {exc}") from exc
