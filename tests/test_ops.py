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
