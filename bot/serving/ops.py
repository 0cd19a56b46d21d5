"""The worker's operations endpoints: /metrics (Prometheus), /healthz (alive), /readyz (can work)."""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], Awaitable[dict[str, bool]]]
DEGRADING = frozenset({"model_provider"})
"""Checks whose failure leaves the process able to take work (it is kept, answered later): /readyz
says "degraded" with 200, so an orchestrator does not restart or unroute every instance for an outage
of the provider they all share; the check itself reads false."""


def add_health_routes(app: web.Application, ready: ReadyCheck) -> None:
    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(_request: web.Request) -> web.Response:
        checks = await ready()
        ok = all(passed for name, passed in checks.items() if name not in DEGRADING)
        status = ("ready" if all(checks.values()) else "degraded") if ok else "not ready"
        return web.json_response({"status": status, "checks": checks}, status=200 if ok else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


async def start_ops_server(*, host: str, port: int, ready: ReadyCheck, tries: int = 1) -> web.AppRunner | None:
    """Serve /metrics, /healthz and /readyz on ``port`` (0 = off), or, while it is in use (another worker
    on this host), on the next of ``tries`` ports. Returns the runner to clean up; the last OSError when
    no port could be had."""
    if port == 0:
        return None
    app = web.Application()
    # prometheus_client's own handler: Prometheus text or OpenMetrics as the scraper's Accept asks,
    # gzip when accepted, ?name[]= filters
    app.router.add_get("/metrics", make_aiohttp_handler())
    add_health_routes(app, ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    last = min(port + max(tries, 1), 65536) - 1
    for candidate in range(port, last + 1):
        try:
            await web.TCPSite(runner, host, candidate).start()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE and candidate < last:
                continue
            await runner.cleanup()
            raise
        if candidate != port:
            log.info("METRICS_PORT %s is in use (another worker on this host?): took %s", port, candidate)
        log.info("metrics and health on %s:%s (/metrics, /healthz, /readyz)", host, candidate)
        return runner
    raise AssertionError("unreachable")  # pragma: no cover
