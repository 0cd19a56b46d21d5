"""The Bot API session: aiogram's aiohttp session that re-checks the chat's lease at the last moment.

After the worker checked its fence a request can still wait: for a pooled or new connection, for
aiohttp's write task, or in a process frozen past its lease (SIGSTOP, a VM pause). Sent then, a reply
could reach the customer after the chat's next worker answered. So ``CURRENT_FENCE`` is checked once
the connection is in hand and again right before the bytes are written; a request whose lease may be
gone sends nothing and fails with LeaseLostError."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

import aiogram
import certifi
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.methods import TelegramMethod
from aiohttp import ClientRequest, ClientSession, ClientTimeout, TCPConnector
from aiohttp.hdrs import USER_AGENT
from aiohttp.http import SERVER_SOFTWARE

from services.core.errors import LeaseLostError
from services.core.fence import CURRENT_FENCE

if TYPE_CHECKING:
    from aiogram import Bot
    from aiogram.methods.base import TelegramType
    from aiohttp.abc import AbstractStreamWriter
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace


_UNFENCED = ("/sendChatAction",)
"""Methods a late call of costs nothing: "typing…" shown late duplicates no message (and refusing it
would end aiogram's typing task with an exception nobody awaits)."""
_NOT_DELIVERIES = ("sendChatAction", "sendMessageDraft")
"""Methods whose request is not counted in ``Fence.in_flight``: nothing the customer keeps (a draft is
replaced by the reply), so a lease lost meanwhile cancels the turn at once."""


def _lease_gone(req: ClientRequest) -> LeaseLostError | None:
    fence = CURRENT_FENCE.get()
    if fence is None or req.url.path.endswith(_UNFENCED) or fence.remaining() > 0:
        return None
    return LeaseLostError(f"lease {fence.token} may have expired; the request is not sent")


class FencedConnector(TCPConnector):
    """Hands out no connection to a request whose chat's lease may have expired."""

    async def connect(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: ClientTimeout,  # noqa: ASYNC109 (aiohttp's signature)
    ) -> Connection:
        connection = await super().connect(req, traces, timeout)
        if (lost := _lease_gone(req)) is not None:
            connection.release()  # back to the pool, unused
            raise lost
        return connection


class FencedRequest(ClientRequest):
    """Writes nothing once the lease may have expired. aiohttp 3.14 (locked) buffers the headers until the body
    goes, so nothing reaches the server; 3.9 (the lowest allowed) has sent them already, and the server sees
    a request without its body on a closed connection, which it does not process."""

    async def write_bytes(self, writer: AbstractStreamWriter, conn: Connection, *args: Any) -> None:
        # *args: aiohttp 3.9 passes (writer, conn), newer ones a content length as well
        if (lost := _lease_gone(self)) is not None:
            assert conn.protocol is not None
            # what the request's caller gets instead of a reply; the connection is not reused (aiohttp
            # closes it when the caller's read fails: closing it here would break a read not yet begun,
            # as on Python 3.12+, where this runs before send() returns)
            conn.protocol.set_exception(lost)
            conn.protocol.force_close()
            return
        await super().write_bytes(writer, conn, *args)


class FencedSession(AiohttpSession):
    """aiogram's AiohttpSession (same arguments but ``proxy``) whose aiohttp session is built here, with the
    FencedConnector and FencedRequest passed through ClientSession's public ``connector=`` and
    ``request_class=`` (aiogram has no parameter for either). The connector gets aiogram's settings: the
    certifi CA bundle, ``limit`` connections and a one-hour DNS cache."""

    def __init__(self, *, limit: int = 100, **kwargs: Any) -> None:
        if kwargs.get("proxy") is not None:
            raise TypeError("FencedSession does not support a proxy (its connector is the FencedConnector)")
        super().__init__(limit=limit, **kwargs)
        self.limit = limit
        self._fenced: ClientSession | None = None

    async def create_session(self) -> ClientSession:
        if self._fenced is None or self._fenced.closed:
            connector = FencedConnector(
                ssl=ssl.create_default_context(cafile=certifi.where()), limit=self.limit, ttl_dns_cache=3600
            )
            self._fenced = ClientSession(
                connector=connector,
                request_class=FencedRequest,
                headers={USER_AGENT: f"{SERVER_SOFTWARE} aiogram/{aiogram.__version__}"},
            )
        return self._fenced

    async def make_request(
        self,
        bot: Bot,
        method: TelegramMethod[TelegramType],
        timeout: int | None = None,  # noqa: ASYNC109 (aiogram's signature)
    ) -> TelegramType:
        """aiogram's request, counted in the chat's ``Fence.in_flight`` while it is under way (a request to
        the customer: see ``_NOT_DELIVERIES``)."""
        fence = CURRENT_FENCE.get()
        if fence is None or method.__api_method__ in _NOT_DELIVERIES:
            return await super().make_request(bot, method, timeout)
        fence.in_flight += 1
        try:
            return await super().make_request(bot, method, timeout)
        finally:
            fence.in_flight -= 1

    async def close(self) -> None:
        if self._fenced is not None and not self._fenced.closed:
            await self._fenced.close()
        await super().close()  # aiogram's own session is never made; closes nothing
