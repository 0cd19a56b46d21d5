"""What every Redis-backed component shares: the client type (one server or a Redis Cluster), the one
way to register a Lua script (single-slot checked), Lua snippets and the translation of redis-py's
errors."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import IntEnum
from typing import Any, TypeAlias

import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterCrossSlotError,
    ClusterDownError,
    CrossSlotTransactionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)

from services.core.errors import CorruptSessionError, StoreError, StoreUnavailableError
from services.ports.sessions import TURN_IDS_KEPT

AnyRedis: TypeAlias = Redis | RedisCluster
"""A client of one Redis server or of a Redis Cluster (``REDIS_CLUSTER``); every component takes either."""


class CrossSlotError(StoreError):
    """A script or transaction was given keys of more than one hash slot: a bug, never retried (it
    would fail on Redis Cluster with CROSSSLOT, so it is refused on a single server too)."""


def slot_of(key: str | bytes) -> int:
    """The Redis Cluster hash slot of ``key`` (its ``{tag}`` if it has one)."""
    return int(key_slot(key.encode() if isinstance(key, str) else key))


def check_one_slot(keys: Sequence[str | bytes], what: str = "script") -> None:
    """Raise CrossSlotError unless every key of ``keys`` is in the same hash slot."""
    slots = {slot_of(key) for key in keys}
    if len(slots) > 1:
        raise CrossSlotError(f"{what} touches keys of {len(slots)} hash slots: {[_text(k) for k in keys]}")


def _text(key: str | bytes) -> str:
    return key.decode(errors="replace") if isinstance(key, bytes) else key


class SlotScript:
    """A registered Lua script that refuses keys of more than one hash slot, on every deployment."""

    def __init__(self, redis: AnyRedis, source: str) -> None:
        self._script = redis.register_script(source)
        self.source = source

    async def __call__(self, *, keys: Sequence[str | bytes], args: Iterable[Any] = ()) -> Any:
        check_one_slot(keys)
        return await self._script(keys=list(keys), args=list(args))


class Status(IntEnum):
    """The status a Lua script returns (alone, or first in its reply), named once for both sides: the
    Lua text writes the name (``register`` puts the number in), Python compares with the member."""

    DONE = 1
    """Written; for a queue step: an item follows."""
    NOTHING = 0
    """Nothing written: a duplicate, already relayed, not open; for a queue step: the inbox is empty
    and the chat released."""
    STALE = -1
    """The session changed since it was loaded (its version moved on): nothing written."""
    LEASE_LOST = -1  # an alias of STALE (the same number): a queue step found the lease gone
    FENCE_LOST = -2
    """A fenced write whose caller no longer holds the chat's lease: nothing written."""
    BUSY = -3
    """Another worker holds the chat's lease."""


_STATUS_NAMES = re.compile(r"\b(" + "|".join(Status.__members__) + r")\b")


def with_status(source: str) -> str:
    """``source`` with every ``Status`` name replaced by its number."""
    return _STATUS_NAMES.sub(lambda match: str(int(Status[match[1]])), source)


def register(redis: AnyRedis, source: str) -> SlotScript:
    """The one way the code base registers a Lua script (a test checks there is no other); the
    ``Status`` names in ``source`` become their numbers."""
    return SlotScript(redis, with_status(source))


LUA_NOW = "local t = redis.call('TIME'); local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
"""Defines ``now``: the Redis server's clock in milliseconds (one clock for every worker)."""

LUA_FENCE = """
local function holds(lease_key, token)
  return token == '' or redis.call('GET', lease_key) == token
end
local function nobody_else_holds(lease_key, token)
  local holder = redis.call('GET', lease_key)
  return token == '' or not holder or holder == token
end
"""
"""Defines the two fencing checks a worker's per-chat writes start with (an empty token means: not
written on behalf of a lease, e.g. the single-process mode):

- ``holds(lease_key, token)``: the caller holds the chat's lease. Every write that decides something
  (a turn, a compaction, ``/new``, ``/forget``, taking or acknowledging an item) needs it.
- ``nobody_else_holds(lease_key, token)``: the caller holds the lease, or nobody does (it expired and
  no other worker took the chat). Enough for the record of something the caller already did (a reply
  sent): the record is true whoever holds the chat, and refusing it only because the caller's own
  time ran out (Redis stalled past the lease) made the next holder send the reply again. A lease that
  another worker took still refuses it, so no write lands in another holder's work."""

LUA_MARK_REPLIED = """
local function mark_replied(key, score, ttl, turn_ids)
  for _, turn_id in ipairs(turn_ids) do redis.call('ZADD', key, score, turn_id) end
  redis.call('ZREMRANGEBYRANK', key, 0, -TURN_IDS_KEPT - 1)
  if ttl > 0 then redis.call('EXPIRE', key, ttl) end
end
""".replace("TURN_IDS_KEPT", str(TURN_IDS_KEPT))
"""Defines ``mark_replied(key, score, ttl, turn_ids)``: records that these turns' replies went out (the
store's own mark, and the marks a worker writes with an update's acknowledgement)."""

_TRANSIENT_REPLY_ERRORS = (ClusterDownError, TryAgainError, ReadOnlyError, OutOfMemoryError, AskError)
"""Error replies after which the same command succeeds later (failover, memory freed), as redis-py
raises them: its parser strips the code of the replies it knows from the message ("CLUSTERDOWN The
cluster is down" → ClusterDownError("The cluster is down"); MASTERDOWN and MOVED are subclasses,
LOADING is a connection error), so these are told by their class."""

_TRANSIENT_CODES = frozenset({"BUSY", "NOREPLICAS"})
"""The transient replies redis-py does not know: their code stays at the start of the message."""


def _reply_error(action: str, exc: ResponseError) -> StoreError:
    """The store error an error reply stands for (see ``redis_errors``)."""
    code = str(exc).split(" ", 1)[0].upper()
    if isinstance(exc, _TRANSIENT_REPLY_ERRORS) or code in _TRANSIENT_CODES:
        return StoreUnavailableError(f"{action}: {type(exc).__name__}: {exc}")
    if isinstance(exc, ClusterCrossSlotError):
        return CrossSlotError(f"{action}: {exc}")
    if code == "WRONGTYPE" or "WRONGTYPE" in str(exc):
        return CorruptSessionError(f"{action}: a key holds the wrong type: {exc}")
    return StoreError(f"{action}: {type(exc).__name__}: {exc}")


def _cluster_error(action: str, exc: RedisClusterException) -> StoreError:
    """A cluster client's own error: a cross-slot request is a bug, anything else transient."""
    if "same key slot" in str(exc) or "same slot" in str(exc):
        return CrossSlotError(f"{action}: {exc}")
    return StoreUnavailableError(f"{action}: {type(exc).__name__}: {exc}")


@contextmanager
def redis_errors(action: str) -> Iterator[None]:
    """Translate redis-py's errors into the engine's transient store error.

    On a cluster, redirections (MOVED, ASK), TRYAGAIN and CLUSTERDOWN are first retried by the client
    (``services.backends.redis.connection``); what is left — a master down longer than those retries, the cluster not
    reachable or not covering every slot yet — is transient too. Only a cross-slot request is a bug.
    A key of the wrong type is a damaged record (CorruptSessionError: quarantined, not retried); any
    other error reply (a script bug) is a permanent StoreError, never retried forever."""
    try:
        yield
    except ResponseError as exc:
        raise _reply_error(action, exc) from exc
    except RedisError as exc:
        raise StoreUnavailableError(f"{action}: {type(exc).__name__}: {exc}") from exc
    except CrossSlotTransactionError as exc:
        raise CrossSlotError(f"{action}: {exc}") from exc
    except RedisClusterException as exc:
        raise _cluster_error(action, exc) from exc
    except (AttributeError, TypeError, RuntimeError) as exc:
        # redis-py's asyncio cluster client can trip over a connection another task is tearing down
        # while a node fails (e.g. "'NoneType' object has no attribute 'writelines'"; redis/redis-py
        # #3546, #3835; under uvloop the same shows as RuntimeError "unable to perform operation on
        # <TCPTransport closed=True>"): a client bug during a transient fault, not ours. Our own bugs
        # stay bugs.
        if not _raised_inside_redis_py(exc):
            raise
        raise StoreUnavailableError(f"{action}: redis-py {type(exc).__name__} during a fault: {exc}") from exc


_REDIS_PY = os.path.dirname(redis.__file__) + os.sep
_ASYNCIO = os.path.dirname(asyncio.__file__) + os.sep


def _is_uvloop(filename: str) -> bool:
    return filename.startswith("uvloop" + os.sep) or f"{os.sep}uvloop{os.sep}" in filename


def _raised_inside_redis_py(exc: BaseException) -> bool:
    """True if the innermost frame that raised ``exc``, past the event loop's own (the asyncio stdlib,
    uvloop), is redis-py's."""
    innermost = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith(_ASYNCIO) and not _is_uvloop(filename):
            innermost = filename
        tb = tb.tb_next
    return innermost is not None and innermost.startswith(_REDIS_PY)
