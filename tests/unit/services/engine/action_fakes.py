"""A small, faithful ``ActionTools`` (services.ports.actions) for the engine's tests: strict schemas in
file order, arguments checked (unknown, extra, missing, pattern), code-rendered confirm texts, and a
shop whose every request is counted by tool and idempotency key (the real Catalog is the spec
package's; this one stands in for it where the engine is under test)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.core.actions import ActionOutcome, Customer, Risk

ORDER_ID = {"type": "string", "pattern": "^[0-9]{4,12}$", "description": "the order number"}


@dataclass(frozen=True)
class FakeTool:
    name: str
    description: str
    risk: Risk
    params: dict[str, dict[str, Any]]
    confirm: str = ""
    needs_phone: bool = False


TOOLS = (
    FakeTool(
        "order_status", "Status and delivery date of one of the customer's orders", "read", {"order_id": ORDER_ID}
    ),
    FakeTool(
        "cancel_order", "Cancel an order not shipped yet", "write", {"order_id": ORDER_ID}, "Cancel order {order_id}?"
    ),
    FakeTool("refund", "Refund an order", "approval", {"order_id": ORDER_ID}, "Refund order {order_id}"),
    FakeTool("callback", "Ask the shop to call the customer back", "read", {}, needs_phone=True),
)


@dataclass
class Request:
    tool: str
    arguments: dict[str, Any]
    customer: Customer
    idempotency_key: str | None


@dataclass
class FakeShop:
    """The operator's API: statuses by order, and every request it received."""

    statuses: dict[str, str] = field(default_factory=lambda: {"5521": "shipped", "7718": "processing"})
    requests: list[Request] = field(default_factory=list)
    on_request: Callable[[Request], Any] | None = None
    """Called with each request as it is made (a test interferes there: a concurrent update...)."""
    big_result: str = ""
    """When set, order_status returns it as the order's notes (a large or hostile response)."""

    def effects(self, tool: str) -> dict[str | None, int]:
        counts: dict[str | None, int] = {}
        for request in self.requests:
            if request.tool == tool:
                counts[request.idempotency_key] = counts.get(request.idempotency_key, 0) + 1
        return counts


class FakeActions:
    """``ActionTools`` over ``FakeShop``."""

    def __init__(self, shop: FakeShop | None = None, tools: tuple[FakeTool, ...] = TOOLS) -> None:
        self.shop = shop or FakeShop()
        self._tools = {tool.name: tool for tool in tools}

    def schemas(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "strict": True,
                    "parameters": {
                        "type": "object",
                        "properties": tool.params,
                        "required": list(tool.params),
                        "additionalProperties": False,
                    },
                },
            }
            for tool in self._tools.values()
        ]

    def names(self) -> list[str]:
        return list(self._tools)

    def risk(self, tool: str) -> Risk:
        return self._tools[tool].risk

    def needs_phone(self, tool: str) -> bool:
        return self._tools[tool].needs_phone

    def check(self, tool: str, arguments: str) -> dict[str, Any] | str:
        spec = self._tools.get(tool)
        if spec is None:
            return f"unknown tool {tool!r}"
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError:
            return "the arguments are not JSON"
        if not isinstance(parsed, dict):
            return "the arguments are not a JSON object"
        if extra := sorted(set(parsed) - set(spec.params)):
            return f"unknown argument {extra[0]!r}"
        if missing := sorted(set(spec.params) - set(parsed)):
            return f"missing argument {missing[0]!r}"
        for name, schema in spec.params.items():
            value = parsed[name]
            if not isinstance(value, str) or not re.fullmatch(schema["pattern"].strip("^$"), value):
                return f"{name} does not match {schema['pattern']}"
        return parsed

    def prompt(self, tool: str, arguments: dict[str, Any]) -> str:
        return self._tools[tool].confirm.format(**arguments)

    async def run(
        self, tool: str, arguments: dict[str, Any], customer: Customer, *, idempotency_key: str | None
    ) -> ActionOutcome:
        request = Request(tool, dict(arguments), customer, idempotency_key)
        self.shop.requests.append(request)
        if self.shop.on_request is not None:
            result = self.shop.on_request(request)
            if hasattr(result, "__await__"):
                await result
        order = str(arguments.get("order_id", ""))
        if tool == "order_status":
            status = self.shop.statuses.get(order)
            if status is None:
                return ActionOutcome("failed", "the order service knows no such order", status=404)
            data: dict[str, Any] = {"status": status, "eta": "2026-12-06"}
            if self.shop.big_result:
                data["notes"] = self.shop.big_result
            return ActionOutcome(
                "ok", "found", data, 200, 0.01, None, f"order_status {order}: {status}, eta 2026-12-06"
            )
        if tool == "cancel_order":
            self.shop.statuses[order] = "cancelled"
            return ActionOutcome("ok", "cancelled", {"status": "cancelled"}, 200, 0.01, idempotency_key,
                                 f"cancel_order {order}: cancelled")  # fmt: skip
        if tool == "refund":
            return ActionOutcome("ok", "refunded", {"status": "refunded"}, 200, 0.01, idempotency_key,
                                 f"refund {order}: refunded")  # fmt: skip
        return ActionOutcome(
            "ok", "a call-back is booked", {"phone": customer.phone}, 200, 0.01, None, "callback booked"
        )
