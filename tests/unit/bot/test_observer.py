"""The engine reports every turn to its observer, whatever front end drives it; the bot's observer
feeds Prometheus, and the in-flight gauge follows the LLM calls."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import REGISTRY

from bot.metrics import LLM_IN_FLIGHT, PrometheusObserver, record_turn
from services.backends.memory import InMemorySessionStore
from services.core.records import Usage
from services.core.tokens import TokenCounter
from services.core.turns import TurnResult
from services.llm.client import LLMClient
from tests.helpers import make_service
from tests.stubs.openai_server import StubOpenAI


class Collector:
    def __init__(self) -> None:
        self.results: list[TurnResult] = []

    def turn_finished(self, result: TurnResult) -> None:
        self.results.append(result)


async def noop(_result: TurnResult) -> None:
    return None


async def test_every_turn_reaches_the_observer(llm: LLMClient, counter: TokenCounter) -> None:
    collector = Collector()
    chat = make_service(store=InMemorySessionStore(), llm=llm, counter=counter, observer=collector)
    await chat.handle(1, "hello", deliver=noop, turn_id="u1")
    await chat.handle(1, "hello", deliver=noop, turn_id="u1")  # redelivered: already answered
    assert [r.duplicate for r in collector.results] == [False, True]


async def test_prometheus_observer_counts_turns(llm: LLMClient, counter: TokenCounter) -> None:
    before = REGISTRY.get_sample_value("sb_turns_total", {"outcome": "ok"}) or 0.0
    chat = make_service(store=InMemorySessionStore(), llm=llm, counter=counter, observer=PrometheusObserver())
    await chat.handle(2, "hello", deliver=noop)
    assert REGISTRY.get_sample_value("sb_turns_total", {"outcome": "ok"}) == before + 1


async def test_in_flight_gauge_follows_the_calls(llm: LLMClient, counter: TokenCounter, stub_llm: StubOpenAI) -> None:
    llm.on_in_flight = LLM_IN_FLIGHT.set
    stub_llm.delays.append(0.5)
    chat = make_service(store=InMemorySessionStore(), llm=llm, counter=counter)
    turn = asyncio.create_task(chat.handle(3, "slow one", deliver=noop))
    for _ in range(100):
        if REGISTRY.get_sample_value("sb_llm_calls_in_flight") == 1.0:
            break
        await asyncio.sleep(0.01)
    assert REGISTRY.get_sample_value("sb_llm_calls_in_flight") == 1.0
    await turn
    assert REGISTRY.get_sample_value("sb_llm_calls_in_flight") == 0.0


def test_a_turns_actions_are_counted_by_tool_and_outcome_with_no_argument_in_a_label() -> None:
    from services.core.actions import ActionOutcome, Customer, PendingAction

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    pending = PendingAction(
        action_id="a1", chat_id=5, tool="cancel_order", risk="write", arguments={"order_id": "5521"},
        prompt="Cancel order 5521?", idempotency_key="k", created=0.0, expires=600.0, customer=Customer(5),
    )  # fmt: skip
    outcomes = (
        ActionOutcome("ok", "shipped", status=200, seconds=0.2, tool="order_status"),
        ActionOutcome("refused", "no such tool", tool="order_status\nINJECTED 5521"),  # a name the model made up
        ActionOutcome("pending_confirmation", "waits", tool="cancel_order"),
    )
    before = {
        "ok": value("sb_action_calls_total", tool="order_status", outcome="ok"),
        "unknown": value("sb_action_calls_total", tool="unknown", outcome="refused"),
        "latency": value("sb_action_call_seconds_count", tool="order_status"),
        "asked": value("sb_action_confirmations_total", step="asked"),
    }
    observer = PrometheusObserver(tools=("order_status", "cancel_order"))
    observer.turn_finished(TurnResult(reply="…", actions=outcomes, pending=pending))
    observer.turn_finished(TurnResult(reply="…", actions=outcomes, pending=pending, duplicate=True))  # not again
    assert value("sb_action_calls_total", tool="order_status", outcome="ok") == before["ok"] + 1
    assert value("sb_action_calls_total", tool="unknown", outcome="refused") == before["unknown"] + 1
    assert value("sb_action_call_seconds_count", tool="order_status") == before["latency"] + 1  # requested only
    assert value("sb_action_confirmations_total", step="asked") == before["asked"] + 1
    exposed = "\n".join(f"{s.name}{s.labels}" for m in REGISTRY.collect() for s in m.samples if "action" in s.name)
    assert "5521" not in exposed and "INJECTED" not in exposed


def test_a_tool_loop_turn_is_compared_with_its_first_prompt_only(caplog: pytest.LogCaptureFixture) -> None:
    """A turn with a tool call makes two model calls: their usage is summed, but the estimate is of the
    first prompt, so the drift (and its warning) compares that prompt alone."""
    result = TurnResult(reply="ok", estimated_tokens=439, usage=Usage(1005, 40), first_prompt_tokens=445)
    with caplog.at_level(logging.WARNING, logger="bot.metrics"):
        drift = record_turn(result)
    assert drift is not None and abs(drift) < 0.05
    assert "prompt token estimate off" not in caplog.text
