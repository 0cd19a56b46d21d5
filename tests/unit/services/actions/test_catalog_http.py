"""One call end to end through the real ActionHttp to a real aiohttp server on 127.0.0.1: the secret
header and the customer's id arrive, a hostile argument stays inside its path segment, the answer is
projected."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.cli import actions
from services.actions.loading import load_catalog
from services.core.actions import Customer
from tests.unit.services.actions.shop import SECRET, VARIABLES

ORDER = {"status": "shipped", "eta": "2026-12-06", "items": [{"name": "kettle"}], "card": "4111"}


@pytest.fixture
async def shop() -> AsyncIterator[tuple[int, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    async def order(request: web.Request) -> web.Response:
        seen.append({"path": request.raw_path, "headers": dict(request.headers)})
        return web.json_response(ORDER)

    app = web.Application()
    app.router.add_get("/api/orders/{tail:.*}", order)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield port, seen
    finally:
        await runner.cleanup()


def shop_file(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "actions.yaml"
    path.write_text(
        json.dumps(
            {
                "hosts": [{"host": f"127.0.0.1:{port}", "private": True}],
                "tools": {
                    "order_status": {
                        "description": "an order",
                        "risk": "read",
                        "method": "GET",
                        "url": f"http://127.0.0.1:{port}/api/orders/{{order_id}}",
                        "params": {"order_id": {"type": "string"}},
                        "headers": {
                            "Authorization": "Bearer ${SHOP_API_TOKEN}",
                            "X-Customer": "{customer.telegram_id}",
                        },
                        "result": ["status", "items.*.name"],
                    }
                },
            }
        )
    )
    return path


async def test_a_call_through_the_real_sender(shop: tuple[int, list[dict[str, Any]]], tmp_path: Path) -> None:
    port, seen = shop
    path = shop_file(tmp_path, port)
    tools = load_catalog(path, variables=VARIABLES, operator_chat_configured=False, timeout=30, max_bytes=100_000)
    try:
        outcome = await tools.run(
            "order_status", {"order_id": "55@evil.com?x=1#"}, Customer(4242), idempotency_key=None
        )
    finally:
        await tools.close()
    assert outcome.kind == "ok" and outcome.status == 200, outcome
    assert outcome.data == {"status": "shipped", "items.*.name": ["kettle"]} and "4111" not in outcome.note
    assert len(seen) == 1 and seen[0]["path"] == "/api/orders/55%40evil.com%3Fx%3D1%23"
    assert seen[0]["headers"]["Authorization"] == f"Bearer {SECRET}" and seen[0]["headers"]["X-Customer"] == "4242"


async def test_the_cli_test_command_through_the_real_sender(
    shop: tuple[int, list[dict[str, Any]]], tmp_path: Path
) -> None:
    port, seen = shop
    tools = load_catalog(
        shop_file(tmp_path, port), variables=VARIABLES, operator_chat_configured=False, timeout=30, max_bytes=100_000
    )
    out = io.StringIO()
    code = await actions.test(tools, "order_status", ["order_id=5521"], Customer(7), send=False, out=out)
    lines = out.getvalue().splitlines()
    assert code == 0 and lines[0].startswith("ok (HTTP 200, "), lines
    assert lines[1:] == [
        'the model reads: {"status":"shipped","items.*.name":["kettle"]}',
        "remembered as: order_status order_id=5521: status=shipped, items.*.name=kettle",
    ]
    assert seen[0]["path"] == "/api/orders/5521" and SECRET not in out.getvalue()
