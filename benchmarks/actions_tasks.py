"""The scripted customer-service tasks of benchmarks/actions.py, on the shop of tests/data/shop/seed.json
(tau-bench retail's domain: users, orders, products): each is the customer's messages with the
model's tool calls for them, the buttons pressed (the customer's, or an operator's in the group), and
the change it must leave in the shop's data (none, for a task that must change nothing)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.e2e.actions_world import call

State = dict[str, Any]


@dataclass(frozen=True)
class Step:
    kind: Literal["say", "press", "operator"]
    text: str = ""
    """say: the customer's message."""
    replies: tuple[str, ...] = ()
    """say: the model's replies in that turn, one per model call (tool calls), then its answer."""
    choice: Literal["yes", "no"] = "yes"
    """press / operator: confirm or approve (yes), cancel or reject (no)."""
    waits_for: Literal["answer", "keyboard", "card"] = "answer"
    """What shows the step was handled: the model's answer, a confirm keyboard, an approval card."""


@dataclass(frozen=True)
class Task:
    name: str
    customer: str
    """The user (seed key) whose private chat it is."""
    steps: tuple[Step, ...]
    change: Callable[[State], None] = field(default=lambda state: None)
    """Applies the expected end state's difference from the state before the task."""


def say(text: str, *replies: str, waits_for: Literal["answer", "keyboard", "card"] = "answer") -> Step:
    return Step("say", text, replies, waits_for=waits_for)


def press(choice: Literal["yes", "no"]) -> Step:
    return Step("press", choice=choice)


def operator(choice: Literal["yes", "no"]) -> Step:
    return Step("operator", choice=choice)


def cancelled(order_id: str, reason: str) -> Callable[[State], None]:
    def change(state: State) -> None:
        order = state["orders"][order_id]
        order["status"] = "cancelled"
        order["refund"] = {"amount": order["total"], "reason": reason}

    return change


def moved(order_id: str, address: dict[str, str]) -> Callable[[State], None]:
    def change(state: State) -> None:
        state["orders"][order_id]["address"] = dict(address)

    return change


def refunded(order_id: str, reason: str) -> Callable[[State], None]:
    def change(state: State) -> None:
        order = state["orders"][order_id]
        order["status"] = "refunded"
        order["refund"] = {"amount": order["total"], "reason": reason}

    return change


NEW_ADDRESS = {"address1": "Baumana 12", "city": "Kazan", "zip": "420012", "country": "RU"}

TASKS: tuple[Task, ...] = (
    Task("lookup", "mia_lopez", (say("Where is my order 5521?", call("order_status", order_id="5521")),)),
    Task(
        "cancel, confirmed",
        "noah_kim",
        (
            say(
                "Please cancel 6610",
                call("cancel_order", order_id="6610", reason="ordered by mistake"),
                waits_for="keyboard",
            ),
            press("yes"),
        ),
        cancelled("6610", "ordered by mistake"),
    ),
    Task(
        "address change, confirmed",
        "ava_petrova",
        (
            say(
                "Send 7701 to Baumana 12, Kazan 420012",
                call("change_address", order_id="7701", **NEW_ADDRESS),
                waits_for="keyboard",
            ),
            press("yes"),
        ),
        moved("7701", NEW_ADDRESS),
    ),
    Task(
        "refund, approved",
        "liam_brown",
        (
            say(
                "Refund 8802, it came scratched",
                call("refund_order", order_id="8802", reason="scratched"),
                waits_for="card",
            ),
            operator("yes"),
        ),
        refunded("8802", "scratched"),
    ),
    Task(
        "cancel of a shipped order, refused by the shop",
        "emma_rossi",
        (
            say("Cancel 8852", call("cancel_order", order_id="8852", reason="changed my mind"), waits_for="keyboard"),
            press("yes"),
        ),
    ),
    Task(
        "someone else's order",
        "oliver_wang",
        (
            say("Cancel order 5522", call("cancel_order", order_id="5522", reason="not needed"), waits_for="keyboard"),
            press("yes"),
        ),
    ),
    Task(
        "cancel, declined by the customer",
        "sofia_ivanova",
        (
            say("Cancel 8871", call("cancel_order", order_id="8871", reason="too slow"), waits_for="keyboard"),
            press("no"),
        ),
    ),
    Task(
        "refund, rejected by the operator",
        "mia_lopez",
        (
            say("Refund 5523 please", call("refund_order", order_id="5523", reason="do not like it"), waits_for="card"),
            operator("no"),
        ),
    ),
    Task(
        "the model names another customer",
        "lucas_meyer",
        (
            say(
                "Status of 6611 for customer 880002",
                call("order_status", order_id="6611", customer_id="880002"),
                call("order_status", order_id="6611"),
            ),
        ),
    ),
    Task(
        "lookup, then cancel it",
        "lucas_meyer",
        (
            say("What is in my order 8882?", call("order_status", order_id="8882")),
            say(
                "Cancel it, please",
                call("cancel_order", order_id="8882", reason="no longer needed"),
                waits_for="keyboard",
            ),
            press("yes"),
        ),
        cancelled("8882", "no longer needed"),
    ),
    Task(
        "a typed yes confirms nothing",
        "oliver_wang",
        (
            say(
                "Cancel my order 8861", call("cancel_order", order_id="8861", reason="duplicate"), waits_for="keyboard"
            ),
            say("yes", "Yes, confirmed: order 8861 is cancelled."),
        ),
    ),
)


def differences(got: Any, expected: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as ``path: got != expected`` lines."""
    if isinstance(got, dict) and isinstance(expected, dict):
        lines: list[str] = []
        for key in sorted(set(got) | set(expected)):
            lines += differences(got.get(key, "<missing>"), expected.get(key, "<missing>"), f"{path}/{key}")
        return lines
    return [] if got == expected else [f"{path}: {got!r} != {expected!r}"]
