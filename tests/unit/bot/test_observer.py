"""The engine reports every turn to its observer, whatever front end drives it; the bot's observer
feeds Prometheus, and the in-flight gauge follows the LLM calls."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from bot.metrics import LLM_IN_FLIGHT, PrometheusObserver
from services.backends.memory import InMemorySessionStore
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
