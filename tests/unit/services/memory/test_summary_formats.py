"""Summary response formats, JSON read out of replies, the summary circuit breaker and extractive folds
(unit level, against the stub model through a real AsyncOpenAI client)."""

from __future__ import annotations

import json

import pytest

from prompts import default_registry
from services.core.errors import SummaryError
from services.core.records import StoredMessage
from services.core.summary_state import SummaryState
from services.core.tokens import TokenCounter
from services.memory.breaker import CircuitBreaker
from services.memory.summarizer import Summarizer
from services.memory.summary_format import read_summary
from tests.stubs.openai_server import StubOpenAI
from tests.unit.services.llm.test_llm import client_for

TURNS = (StoredMessage(1, "user", "My order 7718 is late, mail me at ann@example.com", 20),)


def summarizer_for(stub: StubOpenAI, counter: TokenCounter, **kwargs: object) -> tuple[Summarizer, list[str]]:
    summarizer = Summarizer(
        llm=client_for(stub.base_url),
        counter=counter,
        prompt=default_registry().get("summary"),
        max_tokens=300,
        **kwargs,  # type: ignore[arg-type]
    )
    outcomes: list[str] = []
    summarizer.on_attempt = outcomes.append
    return summarizer, outcomes


def test_json_is_read_out_of_prose_and_fences() -> None:
    body = json.dumps({"topic": "late {order}", "key_facts": ["7718"]})
    summary, bare, _ = read_summary(f"Sure! Here it is:\n```json\n{body}\n```\nAnything else?")
    assert summary is not None and summary.key_facts == ["7718"] and summary.topic == "late {order}"
    assert not bare
    assert read_summary(body)[1] is True
    assert read_summary("no json here {not json}")[0] is None
    assert read_summary('{"topic": 3, "extra": 1}')[0] is None, "validated against the schema"


async def test_a_server_ignoring_response_format_moves_to_plain_without_losing_a_summary(
    stub_llm: StubOpenAI, counter: TokenCounter
) -> None:
    stub_llm.summary_format_support = "ignore"
    summarizer, outcomes = summarizer_for(stub_llm, counter)
    for _ in range(3):
        outcome = await summarizer.fold(None, TURNS)
        assert "7718" in " ".join(outcome.summary.key_facts)
    assert outcomes == ["ok", "ok", "ok"] and summarizer.formats.current == "plain"
    kinds = [(r.get("response_format") or {}).get("type") for r in stub_llm.summary_requests]
    assert kinds == ["json_schema", "json_object", None]
    assert "No text before or after it" in stub_llm.summary_requests[-1]["messages"][0]["content"]


async def test_a_400_naming_response_format_falls_back_once_and_is_remembered(
    stub_llm: StubOpenAI, counter: TokenCounter
) -> None:
    stub_llm.summary_format_support = "json_object"
    summarizer, outcomes = summarizer_for(stub_llm, counter)
    await summarizer.fold(None, TURNS)
    await summarizer.fold(None, TURNS)
    assert outcomes == ["rejected", "ok", "ok"] and summarizer.formats.current == "json_object"


async def test_a_fixed_format_does_not_fall_back(stub_llm: StubOpenAI, counter: TokenCounter) -> None:
    stub_llm.summary_format_support = "reject"
    summarizer, outcomes = summarizer_for(stub_llm, counter, response_format="json_schema")
    with pytest.raises(SummaryError):
        await summarizer.fold(None, TURNS)
    assert outcomes == ["rejected"] and summarizer.formats.current == "json_schema"


async def test_prose_only_fails_counted_and_opens_the_breaker(stub_llm: StubOpenAI, counter: TokenCounter) -> None:
    now = [0.0]
    breaker = CircuitBreaker(failures=2, cooldown=60, clock=lambda: now[0])
    changes: list[bool] = []
    breaker.on_change = changes.append
    stub_llm.summary_format_support = "prose"
    summarizer, outcomes = summarizer_for(stub_llm, counter, breaker=breaker)
    for _ in range(2):
        assert breaker.allow()
        with pytest.raises(SummaryError):
            await summarizer.fold(None, TURNS)
    assert outcomes == ["invalid"] * 6, "schema, object, plain twice; then plain twice"
    assert len(stub_llm.summary_requests) == 6
    assert changes == [True] and not breaker.allow()
    now[0] = 61
    assert breaker.allow() and not breaker.allow(), "one trial after the cool-down"
    stub_llm.summary_format_support = "all"
    await summarizer.fold(None, TURNS)
    assert changes == [True, False] and breaker.allow()


def test_extractive_fold_keeps_identifiers_and_stays_under_the_cap(counter: TokenCounter) -> None:
    summarizer = Summarizer(llm=None, counter=counter, prompt=default_registry().get("summary"), max_tokens=60)  # type: ignore[arg-type]
    outcome = summarizer.extractive(SummaryState(topic="late parcel"), TURNS)
    text = " ".join(outcome.summary.key_facts)
    assert "7718" in text and "ann@example.com" in text and outcome.summary.topic == "late parcel"
    many = tuple(
        StoredMessage(n, "user", f"Tracking number 55{n:03d}-12{n:02d} and order 9{n:03d}", 20) for n in range(30)
    )
    outcome = summarizer.extractive(None, many)
    assert outcome.block_tokens <= 60 and "9029" in " ".join(outcome.summary.key_facts), "the newest kept"
