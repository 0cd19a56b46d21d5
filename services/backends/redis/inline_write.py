"""redis-py's connections, with the write timeout taken inline instead of in a task of its own.

redis-py bounds every write with ``asyncio.wait_for``, which on Python 3.11 starts a task per command;
``asyncio.timeout`` gives the same bound (the write cancelled, the connection dropped, redis-py's
``TimeoutError``) without one. Other versions keep redis-py's classes: from 3.12 ``wait_for`` is built on
``asyncio.timeout``, and before 3.11.3 ``asyncio.timeout`` could turn a timeout into a cancellation.
``inline_write_class(cls)`` replaces only ``send_packed_command``, mirroring redis-py 8.1's; a test fails
when redis-py's changes. What it saves: ``benchmarks/load.py --callgrind``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

TASK_PER_WRITE = (3, 11, 3) <= sys.version_info < (3, 12)
"""Whether the classes change on this Python: ``wait_for`` makes a task per command and
``asyncio.timeout`` is sound."""


class _InlineWriteTimeout(AbstractConnection):
    async def send_packed_command(self, command: bytes | str | Iterable[bytes], check_health: bool = True) -> None:
        # redis-py 8.1's AbstractConnection.send_packed_command, with asyncio.timeout for wait_for
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        if check_health:
            await self.check_health()  # type: ignore[no-untyped-call]
        try:
            if isinstance(command, str):
                command = command.encode()
            if isinstance(command, bytes):
                command = [command]
            async with asyncio.timeout(self.socket_timeout or None):
                await self._send_packed_command(command)
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
    """``cls`` (a redis-py asyncio connection class) writing with an inline timeout where that saves a
    task per command (``cls`` itself elsewhere); one class per ``cls``, shared by pools and nodes."""
    if not TASK_PER_WRITE or issubclass(cls, _InlineWriteTimeout):
        return cls
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"InlineWrite{cls.__name__}", (_InlineWriteTimeout, cls), {"__module__": __name__})
    return _CLASSES[cls]
