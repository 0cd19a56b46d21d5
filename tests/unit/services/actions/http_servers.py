"""Real aiohttp servers on loopback for the ActionHttp tests, counting the connections they accept
and the requests they answer (a refused request must leave both at zero)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Served:
    port: int = 0
    connections: int = 0
    requests: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at teardown: handlers that hang or drip wait on it."""


SERVED = web.AppKey("served", Served)


async def ok_json(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "shipped"})


@asynccontextmanager
async def serve(
    handler: Handler = ok_json, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
) -> AsyncIterator[Served]:
    served = Served()

    async def record(request: web.Request) -> web.StreamResponse:
        served.requests.append(request.raw_path)
        served.headers.append(dict(request.headers))
        return await handler(request)

    app = web.Application()
    app[SERVED] = served
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    protocol = runner.server
    assert protocol is not None

    def accepted() -> web.RequestHandler:
        served.connections += 1
        return protocol()

    server = await asyncio.get_running_loop().create_server(accepted, host, port, ssl=tls)
    served.port = server.sockets[0].getsockname()[1]
    try:
        yield served
    finally:
        served.stop.set()
        server.close()
        await runner.cleanup()


def served_of(request: web.Request) -> Served:
    return request.app[SERVED]


async def hang(request: web.Request) -> web.StreamResponse:
    await served_of(request).stop.wait()
    return web.Response(text="late")


async def drip(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.content_length = 1_000
    await response.prepare(request)
    while not served_of(request).stop.is_set():
        await response.write(b"x")
        await asyncio.sleep(0.05)
    return response


async def claims_a_gigabyte(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.content_length = 10**9
    await response.prepare(request)
    await response.write(b"{}")
    await served_of(request).stop.wait()
    return response


async def endless_chunks(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        while not served_of(request).stop.is_set():
            await response.write(b"y" * 4096)
    except (ConnectionError, RuntimeError):
        pass
    return response
