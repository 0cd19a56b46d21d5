"""A bounded connection pool that waits for a connection only when every one is busy.

Kept because redis-py's ``BlockingConnectionPool`` loses a wake-up on Python 3.11: a waiter woken by a
release and cancelled before it runs keeps the freed place, so the next command waits out the whole
timeout (``test_redis_pool.py``). Here a free connection is handed out as
``ConnectionPool`` does; when all ``max_connections`` are busy a command queues (FIFO) for at most
``timeout`` seconds, and a cancelled waiter passes its place on. It uses ``ConnectionPool``'s private
``_lock`` and ``_in_use_connections`` (a test checks they exist).
Cost per command: ``benchmarks/redis_pool.py``.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError

if sys.version_info >= (3, 11, 3):
    from asyncio import timeout as async_timeout
else:  # asyncio.timeout could turn a timeout into a cancellation before 3.11.3 (redis-py does the same)
    from async_timeout import timeout as async_timeout  # type: ignore[no-redef, import-not-found, unused-ignore]


class WaitingConnectionPool(ConnectionPool):
    """``ConnectionPool`` with at most ``max_connections`` in use; beyond it a command waits up to
    ``timeout`` seconds for a released one."""

    def __init__(self, *, timeout: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timeout = timeout
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._granted = 0
        """Connections promised to commands that have not taken them yet (woken or on their way)."""

    def _unpromised(self) -> int:
        return self.max_connections - len(self._in_use_connections) - self._granted

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> AbstractConnection:
        """A connected connection; waits (FIFO) while all are in use, ``ConnectionError`` after
        ``timeout`` seconds of waiting."""
        if self._waiters:
            self._grant_to_waiters()
        if not self._waiters and self._unpromised() > 0:
            self._granted += 1
        else:
            await self._wait_for_grant()
        # ConnectionPool.get_connection's steps. The promise ends as soon as the connection counts as
        # in use, before it is (re)connected: a slow connect must not hold a second place meanwhile.
        try:
            async with self._lock:
                connection: AbstractConnection = self.get_available_connection()  # type: ignore[no-untyped-call]
        except BaseException:
            self._granted -= 1
            self._grant_to_waiters()
            raise
        self._granted -= 1
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)  # passes the place on
            raise
        return connection

    async def release(self, connection: AbstractConnection) -> None:
        """Return ``connection`` to the pool and hand the freed place to the first waiter."""
        try:
            await super().release(connection)
        finally:
            self._grant_to_waiters()

    async def _wait_for_grant(self) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with async_timeout(self.timeout):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._granted -= 1  # woken, but it will not take the connection: the next one may
                self._grant_to_waiters()
            elif waiter in self._waiters:  # (a cancelled waiter may have been dropped by a release)
                self._waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise RedisConnectionError("No connection available.") from exc
            raise

    def _grant_to_waiters(self) -> None:
        while self._waiters and self._unpromised() > 0:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled waiter's future is cancelled with it
                waiter.set_result(None)
                self._granted += 1
