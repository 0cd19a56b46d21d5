"""The shop API the actions tests talk to (tests/stubs/shop_api.py): its own promises, over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.stubs.shop_api import FENCE_TEXT, ShopApi

TOKEN = "shop-token-123"
MIA, NOAH = "880001", "880002"


@pytest.fixture
async def shop() -> AsyncIterator[ShopApi]:
    api = ShopApi(token=TOKEN, slow_seconds=0.2, oversize_bytes=3000)
    await api.start()
    yield api
    await api.stop()


async def call(
    shop: ShopApi,
    method: str,
    path: str,
    *,
    customer: str | None = MIA,
    token: str | None = TOKEN,
    key: str | None = None,
    body: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if customer is not None:
        headers["X-Customer-Telegram-Id"] = customer
    if key is not None:
        headers["Idempotency-Key"] = key
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, shop.base_url + path, headers=headers, json=body, allow_redirects=False) as response,
    ):
        raw = await response.read()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw


async def test_an_order_is_shown_to_its_owner_only(shop: ShopApi) -> None:
    status, order = await call(shop, "GET", "/api/orders/5521")
    assert status == 200
    assert (order["status"], order["eta"], order["total"]) == ("shipped", "2026-12-08", 88.0)
    assert [i["name"] for i in order["items"]] == ["Monitor stand", "Wireless mouse"]
    assert (await call(shop, "GET", "/api/orders/5521", customer=NOAH))[0] == 404
    assert (await call(shop, "GET", "/api/orders/5521", customer="999"))[0] == 403
    assert (await call(shop, "GET", "/api/orders/5521", customer=None))[0] == 403
    assert [o["order_id"] for o in (await call(shop, "GET", "/api/orders"))[1]["orders"]] == ["5521", "5522", "5523"]


async def test_the_bearer_token_is_required_and_every_request_recorded(shop: ShopApi) -> None:
    assert (await call(shop, "GET", "/api/orders/5521", token=None))[0] == 401
    assert (await call(shop, "GET", "/api/orders/5521", token="other"))[0] == 401
    assert (await call(shop, "GET", "/api/orders/5521"))[0] == 200
    assert [r.auth for r in shop.log] == ["missing", "wrong", "ok"]
    assert len(shop.unauthorized) == 2
    assert shop.log[-1].customer == MIA and shop.log[-1].status == 200


async def test_a_write_has_one_effect_per_idempotency_key(shop: ShopApi) -> None:
    first = await call(shop, "POST", "/api/orders/5522/cancel", key="k1", body={"reason": "no longer needed"})
    again = await call(shop, "POST", "/api/orders/5522/cancel", key="k1", body={"reason": "reworded"})
    assert first == again and first[0] == 200 and first[1]["status"] == "cancelled"
    assert shop.effects == {"k1": 1} and shop.replayed == {"k1": 1}
    assert shop.state()["orders"]["5522"]["refund"] == {"amount": 119.0, "reason": "no longer needed"}
    # a refusal is recorded too: the same key answers it again, with no effect
    refused = await call(shop, "POST", "/api/orders/5521/cancel", key="k2")
    assert refused[0] == 409 and "shipped" in refused[1]["error"]
    assert await call(shop, "POST", "/api/orders/5521/cancel", key="k2") == refused
    assert shop.effects == {"k1": 1} and len(shop.with_key("k2")) == 2


async def test_writes_act_for_the_named_customer_only(shop: ShopApi) -> None:
    before = shop.state()
    assert (await call(shop, "POST", "/api/orders/6610/cancel", key="k"))[0] == 404
    body = {"customer_id": NOAH}  # the body names another customer than the header: nobody
    assert (await call(shop, "POST", "/api/orders/6610/cancel", key="k2", body=body))[0] == 403
    assert shop.state() == before and not shop.effects
    assert (await call(shop, "POST", "/api/orders/6610/cancel", customer=None, key="k3", body=body))[0] == 200


async def test_address_change_and_refund(shop: ShopApi) -> None:
    address = {"address1": "1 New Street", "city": "Austin", "zip": "78702", "country": "US"}
    assert (await call(shop, "POST", "/api/orders/5522/address", key="a", body=address))[0] == 200
    assert shop.state()["orders"]["5522"]["address"] == address
    assert (await call(shop, "POST", "/api/orders/5522/address", key="b", body={"city": "x"}))[0] == 400
    assert (await call(shop, "POST", "/api/orders/5521/address", key="c", body=address))[0] == 409
    assert (await call(shop, "POST", "/api/orders/5522/refund", key="d"))[0] == 409
    status, order = await call(shop, "POST", "/api/orders/5523/refund", key="e", body={"reason": "broken"})
    assert status == 200 and order["status"] == "refunded"
    assert shop.effects == {"a": 1, "e": 1}


async def test_faults(shop: ShopApi) -> None:
    shop.faults["5521"] = "500"
    assert (await call(shop, "GET", "/api/orders/5521"))[0] == 500
    assert (await call(shop, "GET", "/api/orders/5522"))[0] == 200, "only that order's requests"
    shop.fault = "malformed"
    status, raw = await call(shop, "GET", "/api/orders/5522")
    assert status == 200 and isinstance(raw, bytes)
    shop.fault = "oversize"
    status, big = await call(shop, "GET", "/api/orders/5522")
    assert status == 200 and len(json.dumps(big)) > 3000
    shop.fault = "slow"
    assert (await call(shop, "GET", "/api/orders/5522"))[1] == {"status": "late"}
    shop.fault = "redirect"
    status, _ = await call(shop, "GET", "/api/orders/5522")
    assert status == 302 and shop.log[-1].status == 302 and shop.elsewhere == []
    shop.fault = "fence"
    assert FENCE_TEXT in (await call(shop, "GET", "/api/orders/5522"))[1]["items"][0]["name"]
    shop.reset()
    assert shop.fault is None and shop.log == [] and shop.state()["orders"]["5522"]["status"] == "processing"


async def test_paths_are_recorded_as_sent(shop: ShopApi) -> None:
    status, _ = await call(shop, "GET", "/api/orders/..%2Fadmin")
    assert status == 404 and shop.log[-1].path == "/api/orders/..%2Fadmin"
    assert (await call(shop, "GET", "/admin"))[0] == 404


async def test_the_mirror_port_counts_connections(shop: ShopApi) -> None:
    import asyncio

    _reader, writer = await asyncio.open_connection("127.0.0.1", shop.mirror_port)
    writer.close()
    await writer.wait_closed()
    for _ in range(100):
        if shop.mirror_connections:
            break
        await asyncio.sleep(0.01)
    assert shop.mirror_connections == 1


def test_the_actions_file_of_the_e2e_tests_loads(tmp_path: Path) -> None:
    """tests/e2e/actions_world.py's file for this shop is one the bot accepts (with the operators' group)."""
    from services.actions.loading import load_catalog
    from tests.e2e.actions_world import actions_file

    shop = ShopApi(token=TOKEN)
    shop.base_url, shop.elsewhere_url, shop.mirror_port = "http://127.0.0.1:5001", "http://127.0.0.1:5002", 5003
    path = actions_file(shop, tmp_path / "actions.yaml")
    variables = {"SHOP_API_TOKEN": TOKEN}
    catalog = load_catalog(path, variables=variables, operator_chat_configured=True, timeout=2, max_bytes=1000)
    assert list(catalog.names()) == [
        "order_status", "order_lookup", "order_status_mirror", "cancel_order", "change_address", "refund_order",
    ]  # fmt: skip
    assert [catalog.risk(n) for n in ("order_status", "cancel_order", "refund_order")] == ["read", "write", "approval"]
