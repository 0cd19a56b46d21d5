"""redis-py's connections, with the write timeout taken inline instead of in a task of its own.

redis-py bounds every write to the server with ``asyncio.wait_for(write, socket_timeout)``. On
Python 3.11 ``wait_for`` wraps the write in a new task: one task, and an event-loop turn to start it,
for every command sent. In a saturated worker that task was 15 % of its CPU samples (py-spy) and
removing it saved ~5 % of the CPU per turn (``benchmarks/RESULTS.md`` §3). ``asyncio.timeout`` gives
the same bound (the write is cancelled, the connection dropped and redis-py's ``TimeoutError``
raised) without a task. From Python 3.12 ``wait_for`` is built on ``asyncio.timeout`` itself, so
there the two are the same.

``inline_write_class(cls)`` is redis-py's connection class ``cls`` (TCP, TLS or Unix socket, as the
URL chose) with only ``send_packed_command`` replaced; ``services.backends.redis.connection`` gives it
to the pool (one server) or to every node (a cluster).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


class _InlineWriteTimeout(AbstractConnection):
    async def send_packed_command(self, command: bytes | str | Iterable[bytes], check_health: bool = True) -> None:
        # redis-py 8's AbstractConnection.send_packed_command, with asyncio.timeout for wait_for
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        if check_health:
            await self.check_health()  # type: ignore[no-untyped-call]
        try:
            if isinstance(command, str):
                command = command.encode()
            if isinstance(command, bytes):
                command = [command]
            writer = cast(asyncio.StreamWriter, self._writer)
            async with asyncio.timeout(self.socket_timeout or None):
                writer.writelines(command)
                await writer.drain()
        except TimeoutError:  # asyncio.timeout's
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as e:
            await self.disconnect(nowait=True)
            err_no, errmsg = ("UNKNOWN", e.args[0]) if len(e.args) == 1 else (e.args[0], e.args[1])
            raise RedisConnectionError(f"Error {err_no} while writing to socket. {errmsg}.") from e
        except BaseException:
            # as in redis-py: a write cut short leaves the connection unusable
            await self.disconnect(nowait=True)
            raise


_CLASSES: dict[type[Any], type[Any]] = {}


def inline_write_class(cls: type[Any]) -> type[Any]:
    """``cls`` (a redis-py asyncio connection class) writing with an inline timeout; one class per
    ``cls``, so that pools and cluster nodes share it."""
    if issubclass(cls, _InlineWriteTimeout):
        return cls
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"InlineWrite{cls.__name__}", (_InlineWriteTimeout, cls), {"__module__": __name__})
    return _CLASSES[cls]
