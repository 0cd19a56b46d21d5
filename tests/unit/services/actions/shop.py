"""The example ACTIONS_FILE of docs/actions.md, as the actions tests load it (and its parts to break)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from services.actions.catalog import Catalog, Sender
from services.actions.loading import load_tools

SECRET = "tok-3f9a1c7e5b-very-secret"
VARIABLES = {"SHOP_API_TOKEN": SECRET}

EXAMPLE = """\
hosts:
  - host: shop.example.com
  - host: 10.0.0.12:8080
    private: true
tools:
  order_status:
    description: Status, items and delivery date of one of the customer's orders
    risk: read
    method: GET
    url: https://shop.example.com/api/orders/{order_id}
    params:
      order_id: {type: string, pattern: "^[0-9]{4,12}$", description: the order number}
    headers:
      Authorization: Bearer ${SHOP_API_TOKEN}
      X-Customer-Telegram-Id: "{customer.telegram_id}"
    result: [status, eta, items.*.name, total]
  cancel_order:
    description: Cancel one of the customer's orders that has not shipped yet
    risk: write
    confirm: Cancel order {order_id}?
    method: POST
    url: https://shop.example.com/api/orders/{order_id}/cancel
    params:
      order_id: {type: string, pattern: "^[0-9]{4,12}$"}
      reason: {type: string, enum: [changed_mind, too_late, other]}
    headers:
      Authorization: Bearer ${SHOP_API_TOKEN}
    json: {customer_id: "{customer.telegram_id}", reason: "{reason}", note: "by {customer.telegram_id}"}
  refund:
    description: Refund an order
    risk: approval
    method: POST
    url: http://10.0.0.12:8080/refunds
    params:
      order_id: {type: string, pattern: "^[0-9]{4,12}$"}
      amount: {type: number, minimum: 0, maximum: 500}
    json: {order: "{order_id}", amount: "{amount}", phone: "{customer.phone}"}
"""


def example() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(EXAMPLE))


def catalog(
    raw: dict[str, Any] | None = None, sender: Sender | None = None, audit_key: bytes | None = None, **options: Any
) -> Catalog:
    options = {"variables": VARIABLES, "operator_chat_configured": True} | options
    tools, hosts = load_tools(example() if raw is None else raw, **options)

    def no_sender() -> Sender:
        raise AssertionError("this test sends nothing")

    return Catalog(tools, hosts, (lambda: sender) if sender is not None else no_sender, audit_key=audit_key)
