"""ActionHttp: a PreparedRequest sent to the operator's API, or refused without a packet. The host is
declared, resolved once and every address checked (network.py); aiohttp then connects to those
checked addresses only (a resolver that serves them, no DNS cache, no proxy from the environment,
no cookies kept), with TLS verified against the host name. No redirect is followed, nothing is
retried (aiohttp's private ``_retry_connection`` is switched off: it resends an idempotent method once
when a connection drops, with no public switch); time, bytes (decoded too), requests in flight are
bounded."""

from __future__ import annotations

import asyncio
import contextvars
import socket
import ssl
import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp.abc import AbstractResolver

from services.actions.network import HostRules, Refused, Resolve, Target, check_addresses, system_resolve
from services.actions.request import HostRule, HttpKind, HttpResult, PreparedRequest

if TYPE_CHECKING:
    from aiohttp.abc import ResolveResult

CONCURRENCY = 16
"""Requests in flight at once per ActionHttp; more wait (inside their total time)."""

_CHECKED: contextvars.ContextVar[tuple[str, tuple[str, ...]] | None] = contextvars.ContextVar(
    "action_http_checked", default=None
)
"""The request in flight in this task: its host and the addresses checked for it."""


class _Failed(Exception):
    def __init__(self, kind: HttpKind, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.kind, self.reason, self.status = kind, reason, status


class _CheckedResolver(AbstractResolver):
    """aiohttp's resolver: the checked addresses of the request in flight, never a lookup of its own."""

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> list[ResolveResult]:
        checked = _CHECKED.get()
        if checked is None or checked[0] != host.rstrip(".").lower():
            raise OSError(f"no checked address for {host}")
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in checked[1]
        ]

    async def close(self) -> None:
        return None


class ActionHttp:
    """Sends a tool's PreparedRequest to a declared host and says what came back (HttpResult)."""

    def __init__(
        self,
        hosts: Sequence[HostRule],
        *,
        connect_timeout: float = 5.0,
        total_timeout: float,
        max_bytes: int,
        resolve: Resolve | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``resolve``: the one lookup per request (default: the system's); ``ssl_context``: the CAs
        trusted (default: the system's), the host name always verified."""
        if ssl_context is not None and not (
            ssl_context.check_hostname and ssl_context.verify_mode == ssl.CERT_REQUIRED
        ):
            raise ValueError("ssl_context must verify the certificate and the host name")
        self._rules = HostRules(hosts)
        self._connect_timeout = connect_timeout
        self._total_timeout = total_timeout
        self._max_bytes = max_bytes
        self._resolve = resolve or system_resolve
        self._ssl = ssl_context
        self._limit = asyncio.Semaphore(CONCURRENCY)
        self._client: aiohttp.ClientSession | None = None

    async def send(self, request: PreparedRequest) -> HttpResult:
        """One attempt, never retried: ``ok``, ``http_error``, ``timeout``, ``refused``, ``oversize``
        or ``unreachable``, with a short reason that names at most the host and port."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(self._total_timeout):
                async with self._limit:
                    result = await self._send(request)
        except Refused as refusal:
            result = HttpResult(kind="refused", reason=str(refusal))
        except _Failed as failure:
            result = HttpResult(kind=failure.kind, status=failure.status, reason=failure.reason)
        except TimeoutError:
            result = HttpResult(kind="timeout", reason=f"no complete answer within {self._total_timeout:g} s")
        return replace(result, seconds=loop.time() - started)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _send(self, request: PreparedRequest) -> HttpResult:
        target = self._rules.target(request.url)
        headers = _headers(request)
        if target.literal is not None:
            addresses = check_addresses(target, [str(target.literal)])
        else:
            addresses = check_addresses(target, await self._lookup(target))
        token = _CHECKED.set((target.host, addresses))
        try:
            return await self._exchange(request.method, target, headers, request.body)
        finally:
            _CHECKED.reset(token)

    async def _lookup(self, target: Target) -> list[str]:
        try:
            async with asyncio.timeout(self._connect_timeout):
                return list(await self._resolve(target.host, target.port))
        except TimeoutError:
            raise _Failed("timeout", f"the DNS lookup of {target.host} took over {self._connect_timeout:g} s") from None
        except (OSError, UnicodeError):
            raise _Failed("unreachable", f"the DNS lookup of {target.host} failed") from None

    async def _exchange(self, method: str, target: Target, headers: dict[str, str], body: bytes | None) -> HttpResult:
        try:
            async with self._session().request(
                method, target.url, headers=headers, data=body, allow_redirects=False
            ) as response:
                return await _answer(response, self._max_bytes)
        except aiohttp.ServerTimeoutError:
            raise _Failed("timeout", f"{target.shown} did not answer in time") from None
        except aiohttp.ClientSSLError:
            raise _Failed("unreachable", f"TLS with {target.shown} failed (certificate or handshake)") from None
        except aiohttp.ClientConnectorError as error:
            cause = error.os_error.strerror or type(error.os_error).__name__
            raise _Failed("unreachable", f"could not connect to {target.shown}: {cause}") from None
        except aiohttp.ClientError:
            raise _Failed("unreachable", f"the connection to {target.shown} broke") from None
        except (ValueError, UnicodeError):  # its text may hold a header's value: not kept
            raise Refused("aiohttp could not form the request (the method or a header)") from None

    def _session(self) -> aiohttp.ClientSession:
        if self._client is None:
            connector = aiohttp.TCPConnector(
                resolver=_CheckedResolver(),
                use_dns_cache=False,
                limit=CONCURRENCY,
                # always a context: aiohttp 3.9 reads ssl=True as "do not verify"
                ssl=self._ssl or ssl.create_default_context(),
            )
            timeout = aiohttp.ClientTimeout(
                total=self._total_timeout,
                connect=self._connect_timeout,
                sock_connect=self._connect_timeout,
                sock_read=self._total_timeout,
            )
            self._client = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                trust_env=False,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            if hasattr(self._client, "_retry_connection"):
                # aiohttp sends an idempotent method (PUT, DELETE, GET...) again when a connection
                # drops; a write here is sent once, its retry is the engine's, with the same key
                self._client._retry_connection = False
        return self._client


_TOKEN = frozenset("!#$%&'*+-.^_`|~")


def _headers(request: PreparedRequest) -> dict[str, str]:
    """The request's headers, ``Accept-Encoding: identity`` in place of any the file set; a method
    or a header with a line break or NUL is refused (the value is not shown)."""
    if not (request.method.isascii() and request.method.isalpha()):
        raise Refused("the method is not a plain HTTP method")
    headers = {name: value for name, value in request.headers.items() if name.lower() != "accept-encoding"}
    for name, value in headers.items():
        if not name or any(not (char.isascii() and (char.isalnum() or char in _TOKEN)) for char in name):
            raise Refused("a header name is not an HTTP token")
        if any((char < " " and char != "\t") or char == "\x7f" for char in value):
            raise Refused(f"the header {name[:40]} holds a line break or a control character")
    headers["Accept-Encoding"] = "identity"
    return headers


async def _answer(response: aiohttp.ClientResponse, max_bytes: int) -> HttpResult:
    status = response.status
    content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()[:100]
    length = response.content_length
    if length is not None and length > max_bytes:
        return _capped(status, b"", content_type, f"the answer is {length} bytes, over {max_bytes}")
    decoder = _Decoder.of(response.headers.get("Content-Encoding", ""), status)
    try:
        body, whole = await decoder.read(response.content, max_bytes)
    except zlib.error:
        raise _Failed("http_error", f"HTTP {status} with a corrupt compressed body", status) from None
    if not whole:
        return _capped(status, body, content_type, f"the answer passed {max_bytes} bytes")
    if 200 <= status < 300:
        return HttpResult(kind="ok", status=status, body=body, content_type=content_type)
    reason = f"redirect ({status}) not followed" if 300 <= status < 400 else f"HTTP {status}"
    return HttpResult(kind="http_error", status=status, body=body, content_type=content_type, reason=reason)


def _capped(status: int, body: bytes, content_type: str, why: str) -> HttpResult:
    """A body past the cap: ``oversize`` for a 2xx (nothing kept), else ``http_error`` with what was read."""
    if 200 <= status < 300:
        return HttpResult(kind="oversize", status=status, reason=why)
    return HttpResult(kind="http_error", status=status, body=body, content_type=content_type, reason=f"HTTP {status}")


class _Decoder:
    """The body as read: identity, or gzip/deflate decoded with zlib's ``max_length`` so that no
    chunk ever expands past the cap (a gzip bomb stops at max_bytes + 1 decoded bytes)."""

    def __init__(self, inflate: Any | None) -> None:
        self._inflate = inflate
        self._parts: list[bytes] = []
        self._size = 0

    @classmethod
    def of(cls, encoding: str, status: int) -> _Decoder:
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            return cls(None)
        if encoding in ("gzip", "x-gzip", "deflate"):
            return cls(zlib.decompressobj(wbits=zlib.MAX_WBITS | 32))
        raise _Failed("http_error", f"HTTP {status} with an unsupported Content-Encoding", status)

    async def read(self, content: aiohttp.StreamReader, max_bytes: int) -> tuple[bytes, bool]:
        """(the body, whether it is whole); stops as soon as the raw or decoded size passes the cap."""
        raw = 0
        async for chunk in content.iter_any():
            raw += len(chunk)
            if not self._feed(chunk, max_bytes) or raw > max_bytes:
                return b"".join(self._parts)[:max_bytes], False
        whole = self._finish(max_bytes)
        return b"".join(self._parts)[:max_bytes], whole

    def _feed(self, data: bytes, max_bytes: int) -> bool:
        if self._inflate is None:
            self._keep(data)
            return self._size <= max_bytes
        while data and self._size <= max_bytes:
            self._keep(self._inflate.decompress(data, max_bytes - self._size + 1))
            data = self._inflate.unconsumed_tail
        return self._size <= max_bytes

    def _finish(self, max_bytes: int) -> bool:
        if self._inflate is None:
            return True
        if not self._inflate.eof:
            raise zlib.error("the compressed body is cut short")
        self._keep(self._inflate.flush())
        return self._size <= max_bytes

    def _keep(self, data: bytes) -> None:
        self._parts.append(data)
        self._size += len(data)
