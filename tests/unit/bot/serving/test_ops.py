"""The ops server over real HTTP: /metrics by prometheus_client's aiohttp handler (text, OpenMetrics,
gzip), /healthz and /readyz."""

from __future__ import annotations

import gzip

import aiohttp

from bot.metrics import TURNS
from bot.serving.ops import start_ops_server
from tests.conftest import free_port


async def test_metrics_negotiate_format_and_compression() -> None:
    async def ready() -> dict[str, bool]:
        return {"store": True}

    port = free_port()
    runner = await start_ops_server(host="127.0.0.1", port=port, ready=ready)
    assert runner is not None
    TURNS.labels(outcome="ok").inc(0)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as http:
            async with http.get(f"{url}/metrics", headers={"Accept-Encoding": "identity"}) as plain:
                assert plain.status == 200 and plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                assert "Content-Encoding" not in plain.headers
                assert "sb_turns_total" in await plain.text()
            async with http.get(f"{url}/metrics", headers={"Accept-Encoding": "gzip"}) as zipped:
                assert zipped.headers["Content-Encoding"] == "gzip"
                assert b"sb_turns_total" in gzip.decompress(await zipped.read())
            openmetrics = {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "identity"}
            async with http.get(f"{url}/metrics", headers=openmetrics) as om:
                assert om.headers["Content-Type"].startswith("application/openmetrics-text")
                assert (await om.text()).rstrip().endswith("# EOF")
            async with http.get(f"{url}/readyz") as readyz:
                assert readyz.status == 200 and (await readyz.json())["checks"] == {"store": True}
    finally:
        await runner.cleanup()


async def test_workers_on_one_host_take_the_next_free_metrics_port() -> None:
    """Three workers with the same METRICS_PORT on one host: the first takes it, the others the next
    ports (one log line each); with every port of the range taken, the OSError (the start-up error)."""
    import errno
    import socket

    import pytest

    async def ready() -> dict[str, bool]:
        return {"store": True}

    with socket.socket() as taken:  # the first worker (or anything else) holds the port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        runners = []
        try:
            for _ in range(2):
                runner = await start_ops_server(host="127.0.0.1", port=port, ready=ready, tries=10)
                assert runner is not None
                runners.append(runner)
            ports = [runner.addresses[0][1] for runner in runners]
            assert len(set(ports)) == 2 and all(port < other < port + 10 for other in ports), ports
            async with aiohttp.ClientSession() as http:
                for other in ports:
                    async with http.get(f"http://127.0.0.1:{other}/healthz") as healthz:
                        assert healthz.status == 200
            with pytest.raises(OSError) as refused:
                await start_ops_server(host="127.0.0.1", port=port, ready=ready, tries=1)
            assert refused.value.errno == errno.EADDRINUSE
        finally:
            for runner in runners:
                await runner.cleanup()
