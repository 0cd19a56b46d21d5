"""ActionHttp's bounds against real aiohttp servers on loopback: total time (a hanging server, a slow
drip), bytes (a Content-Length over the cap refused before the body, an endless chunked stream, a gzip
bomb stopped at the cap), statuses, requests in flight. Deadlines are hang guards, never assertions."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import pytest
from aiohttp import web

from services.actions.http import CONCURRENCY, ActionHttp
from services.actions.request import HostRule, HttpResult, PreparedRequest
from tests.unit.services.actions.http_servers import (
    Handler,
    claims_a_gigabyte,
    drip,
    endless_chunks,
    hang,
    serve,
)

DEADLINE = 30.0


async def call(handler: Handler, *, total: float = 20.0, max_bytes: int = 64_000, **headers: str) -> HttpResult:
    async with serve(handler) as server:
        http = ActionHttp([HostRule("127.0.0.1", server.port, private=True)], total_timeout=total, max_bytes=max_bytes)
        try:
            request = PreparedRequest("GET", f"http://127.0.0.1:{server.port}/x", headers=headers)
            return await asyncio.wait_for(http.send(request), DEADLINE)
        finally:
            await http.close()


def bomb(decoded_bytes: int) -> bytes:
    """A gzip body of ``decoded_bytes`` zeros, compressed about a thousand times."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(1 << 20)
    parts = [packer.compress(block) for _ in range(decoded_bytes >> 20)]
    return b"".join([*parts, packer.flush()])


async def test_a_server_that_never_answers_is_a_timeout() -> None:
    result = await call(hang, total=0.5)
    assert (result.kind, result.status) == ("timeout", None)
    assert "0.5 s" in result.reason or "did not answer in time" in result.reason


async def test_a_slow_drip_counts_against_the_total() -> None:
    result = await call(drip, total=0.5)
    assert result.kind == "timeout"


async def test_a_content_length_over_the_cap_is_refused_before_the_body() -> None:
    result = await call(claims_a_gigabyte, max_bytes=1_000)  # the body never comes: no wait for it
    assert (result.kind, result.status, result.body) == ("oversize", 200, b"")
    assert "1000000000 bytes, over 1000" in result.reason


async def test_an_endless_chunked_stream_is_cut_at_the_cap() -> None:
    result = await call(endless_chunks, max_bytes=64_000)
    assert (result.kind, result.body) == ("oversize", b"")
    assert "passed 64000 bytes" in result.reason


async def test_a_gzip_bomb_stops_at_the_cap() -> None:
    body = bomb(64 << 20)
    assert len(body) < 64_000 * 8

    async def bombing(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})

    result = await call(bombing, max_bytes=len(body) + 1)  # the compressed body fits, its content does not
    assert result.kind == "oversize" and result.body == b""


async def test_a_compressed_answer_despite_identity_is_decoded_within_the_cap() -> None:
    async def gzipping(request: web.Request) -> web.StreamResponse:
        return web.Response(body=gzip.compress(b'{"eta": "Dec 6"}'), headers={"Content-Encoding": "gzip"})

    result = await call(gzipping)
    assert (result.kind, result.body) == ("ok", b'{"eta": "Dec 6"}')


@pytest.mark.parametrize(
    ("encoding", "body"), [("br", b"\x1b\x00"), ("gzip", b"not gzip at all"), ("gzip", gzip.compress(b"x" * 100)[:20])]
)
async def test_unsupported_or_corrupt_encodings_are_errors(encoding: str, body: bytes) -> None:
    async def encoded(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, headers={"Content-Encoding": encoding})

    result = await call(encoded)
    assert (result.kind, result.status) == ("http_error", 200)


async def test_statuses() -> None:
    async def failing(request: web.Request) -> web.StreamResponse:
        return web.Response(status=500, text="database down")

    async def forbidding(request: web.Request) -> web.StreamResponse:
        return web.Response(status=403, text="z" * 5_000)

    failed, forbidden = await call(failing), await call(forbidding, max_bytes=1_000)
    assert (failed.kind, failed.status, failed.body, failed.reason) == ("http_error", 500, b"database down", "HTTP 500")
    assert (forbidden.kind, forbidden.status, forbidden.body) == ("http_error", 403, b"")


async def test_an_error_body_past_the_cap_is_kept_cut() -> None:
    async def chatty(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=404)
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b"n" * 5_000)
        return response

    result = await call(chatty, max_bytes=1_000)
    assert (result.kind, result.status, result.body) == ("http_error", 404, b"n" * 1_000)


async def test_requests_in_flight_are_bounded() -> None:
    in_flight, peak, release = 0, 0, asyncio.Event()

    async def counting(request: web.Request) -> web.StreamResponse:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if peak >= CONCURRENCY:
            release.set()
        await release.wait()
        in_flight -= 1
        return web.Response(text="ok")

    async with serve(counting) as server:
        http = ActionHttp([HostRule("127.0.0.1", server.port, private=True)], total_timeout=20.0, max_bytes=100)
        try:
            request = PreparedRequest("GET", f"http://127.0.0.1:{server.port}/")
            sends = [http.send(request) for _ in range(CONCURRENCY + 8)]
            results = await asyncio.wait_for(asyncio.gather(*sends), DEADLINE)
        finally:
            await http.close()
    assert [result.kind for result in results] == ["ok"] * (CONCURRENCY + 8)
    assert peak == CONCURRENCY


async def test_a_dropped_connection_is_never_retried() -> None:
    """aiohttp by itself sends an idempotent method (PUT, DELETE, GET...) again once when the
    connection drops; here every request reaches the server once, whatever its method."""

    async def dropping(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        return web.Response(text="never read")

    async with serve(dropping) as server:
        http = ActionHttp([HostRule("127.0.0.1", server.port, private=True)], total_timeout=20.0, max_bytes=100)
        try:
            for method in ("PUT", "DELETE", "GET", "POST"):
                request = PreparedRequest(method, f"http://127.0.0.1:{server.port}/{method}", body=b"{}")
                result = await asyncio.wait_for(http.send(request), DEADLINE)
                assert result.kind == "unreachable" and "broke" in result.reason
        finally:
            await http.close()
    assert server.requests == ["/PUT", "/DELETE", "/GET", "/POST"]


@pytest.mark.parametrize(
    "headers",
    [
        {"X Bad": "1"},
        {"": "1"},
        {"Authorization": "Bearer SECRET-VALUE\nX: 1"},
        {"Authorization": "Bearer SECRET-VALUE\x01"},
    ],
)
async def test_headers_that_cannot_be_sent_are_refused_without_their_value(headers: dict[str, str]) -> None:
    async with serve() as server:
        http = ActionHttp([HostRule("127.0.0.1", server.port, private=True)], total_timeout=20.0, max_bytes=100)
        try:
            request = PreparedRequest("GET", f"http://127.0.0.1:{server.port}/", headers=headers)
            result = await asyncio.wait_for(http.send(request), DEADLINE)
        finally:
            await http.close()
    assert result.kind == "refused" and "SECRET" not in result.reason
    assert server.requests == []
