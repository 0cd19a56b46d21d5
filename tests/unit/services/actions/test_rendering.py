"""A checked call as the request the bot sends: hostile arguments stay inside their path segment or
query value, the identity comes from the Customer only, the body keeps types, secrets are named in
``secret_headers``, a write carries Idempotency-Key, and the confirm text is the code's."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from services.actions.rendering import CompiledTool, NeedsPhone, RenderRefused, render, render_url
from services.core.actions import Customer
from tests.unit.services.actions.shop import SECRET, catalog, example

CUSTOMER = Customer(telegram_id=4242, phone="+15550100")


def compiled(name: str, raw: dict[str, Any] | None = None) -> CompiledTool:
    return next(tool for tool in catalog(raw).tools if tool.name == name)


def open_tool() -> CompiledTool:
    """order_status without the pattern: any string reaches the renderer (as an operator may write it)."""
    raw = example()
    tool = raw["tools"]["order_status"]
    tool["params"]["order_id"] = {"type": "string"}
    tool["query"] = {"q": "{order_id}"}
    return compiled("order_status", raw)


@pytest.mark.parametrize(
    "hostile", ["../x", "../../admin", "a%2Fb", "@evil.com", "x?y=1", "#frag", "a/b", "x\r\nHost: evil", "%00", "é"]
)
def test_a_hostile_argument_stays_inside_its_segment(hostile: str) -> None:
    url = render_url(open_tool(), {"order_id": hostile}, CUSTOMER)
    parts = urlsplit(url)
    assert (parts.scheme, parts.hostname, parts.port, parts.fragment) == ("https", "shop.example.com", None, "")
    segments = parts.path.split("/")
    assert segments[:4] == ["", "api", "orders", segments[3]] and len(segments) == 4
    assert unquote(segments[3]) == hostile
    assert parts.query.count("=") == 1 and unquote(parts.query.removeprefix("q=")) == hostile


@pytest.mark.parametrize("dots", [".", ".."])
def test_a_dot_segment_is_refused(dots: str) -> None:
    with pytest.raises(RenderRefused):
        render_url(open_tool(), {"order_id": dots}, CUSTOMER)


def test_the_identity_comes_from_the_customer_only() -> None:
    request = render(compiled("order_status"), {"order_id": "5521"}, CUSTOMER, idempotency_key=None)
    assert request.headers["X-Customer-Telegram-Id"] == "4242"
    assert request.url == "https://shop.example.com/api/orders/5521"
    tools = catalog()
    assert tools.check("cancel_order", '{"order_id":"5521","reason":"other","customer_id":1}') == (
        "refused: unknown argument(s) customer_id: use only order_id, reason"
    )


def test_the_body_keeps_types_and_substitutes_inside_text() -> None:
    request = render(compiled("cancel_order"), {"order_id": "5521", "reason": "other"}, CUSTOMER, idempotency_key="k-1")
    assert request.method == "POST" and request.url == "https://shop.example.com/api/orders/5521/cancel"
    assert json.loads(request.body or b"") == {"customer_id": 4242, "reason": "other", "note": "by 4242"}
    assert request.headers["Content-Type"] == "application/json" and request.headers["Idempotency-Key"] == "k-1"
    assert request.headers["Authorization"] == f"Bearer {SECRET}"
    assert request.secret_headers == frozenset({"Authorization"})


def test_a_json_string_argument_is_json_encoded() -> None:
    raw = example()
    raw["tools"]["cancel_order"]["params"]["reason"] = {"type": "string"}
    hostile = '", "refund": 1000, "x": "\\'
    request = render(
        compiled("cancel_order", raw), {"order_id": "5521", "reason": hostile}, CUSTOMER, idempotency_key=None
    )
    assert json.loads(request.body or b"")["reason"] == hostile
    assert "refund" not in json.loads(request.body or b"")


def test_typed_numbers_and_the_phone() -> None:
    refund = compiled("refund")
    assert refund.needs_phone
    request = render(refund, {"order_id": "5521", "amount": 12.5}, CUSTOMER, idempotency_key="k-2")
    assert json.loads(request.body or b"") == {"order": "5521", "amount": 12.5, "phone": "+15550100"}
    assert request.url == "http://10.0.0.12:8080/refunds" and request.secret_headers == frozenset()
    with pytest.raises(NeedsPhone):
        render(refund, {"order_id": "5521", "amount": 1}, Customer(telegram_id=4242), idempotency_key=None)


def test_a_read_tool_carries_no_idempotency_key() -> None:
    request = render(compiled("order_status"), {"order_id": "5521"}, CUSTOMER, idempotency_key="k-3")
    assert "Idempotency-Key" not in request.headers


def test_a_header_argument_with_a_line_break_is_refused() -> None:
    raw = example()
    raw["tools"]["order_status"]["params"]["order_id"] = {"type": "string"}
    raw["tools"]["order_status"]["headers"]["X-Order"] = "{order_id}"
    with pytest.raises(RenderRefused):
        render(compiled("order_status", raw), {"order_id": "1\r\nX-Evil: 1"}, CUSTOMER, idempotency_key=None)


def test_the_texts_a_person_decides_on() -> None:
    tools = catalog()
    assert tools.prompt("cancel_order", {"order_id": "5521", "reason": "other"}) == "Cancel order 5521?"
    assert tools.prompt("refund", {"order_id": "5521", "amount": 12.5}) == "Run refund with order_id=5521, amount=12.5?"


def test_the_decision_text_cannot_carry_line_breaks_bidi_controls_or_fake_lines() -> None:
    raw = example()
    raw["tools"]["refund"]["params"]["reason"] = {"type": "string", "maxLength": 4096}
    raw["tools"]["refund"]["json"]["reason"] = "{reason}"
    hostile = "damaged\n\n\u2705 Verified by the shop: approve.\u202e\u2028 ok\u200b\t\x85end"
    text = catalog(raw).prompt("refund", {"order_id": "5521", "amount": 12.5, "reason": hostile})
    assert text == (
        'Run refund with order_id=5521, amount=12.5, reason="damaged \u2705 Verified by the shop: approve. ok end"?'
    )
    raw["tools"]["cancel_order"]["confirm"] = "Cancel order {order_id} because {reason}?"
    long = catalog(raw).prompt("cancel_order", {"order_id": "5521", "reason": 'say "yes" ' * 100})
    assert long.startswith('Cancel order 5521 because "say \\"yes\\" say') and long.endswith('…"?')
    assert len(long) < 300, "each value is cut"
