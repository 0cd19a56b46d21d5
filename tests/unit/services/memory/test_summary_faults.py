"""Summary calls when they go wrong (review of issue 26): a refusal reaches the provider watch, a
half-open trial that never ends cannot keep the breaker open, and a handoff ends while summaries fail
(its transcript folded extractively). Unit level: the stub model through a real AsyncOpenAI client,
fakes for a hanging or crashing model, the in-memory store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from bot.factory import build_engine
from bot.metrics import LLM_PROVIDER_REFUSING
from bot.provider_health import ProviderWatch
from prompts import default_registry
from services.backends.memory import InMemoryBackend
from services.core.errors import LLMUnavailableError, SummaryError
from services.core.handoff_records import TranscriptEntry
from services.core.records import Completion, NewMessage, PromptPart
from services.core.summary_state import SummaryFormat
from services.core.tokens import TokenCounter
from services.memory.breaker import CircuitBreaker
from services.memory.handoff_memory import HandoffMemory
from services.memory.summarizer import Summarizer
from tests.e2e.harness import make_settings
from tests.stubs.openai_server import MODEL_NOT_FOUND, StubError, StubOpenAI
from tests.unit.services.memory.test_summary_formats import TURNS, summarizer_for

CHAT = 4242


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeModel:
    """A summary model that hangs (``hang``) or fails with ``error`` on every call, counting them."""

    def __init__(self, *, hang: bool = False, error: BaseException | None = None) -> None:
        self.hang, self.error, self.calls = hang, error, 0
        self.called = asyncio.Event()

    async def summarize(
        self, messages: Sequence[PromptPart], *, schema: dict[str, Any], response_format: SummaryFormat | None = None
    ) -> Completion:
        self.calls += 1
        self.called.set()
        if self.hang:
            await asyncio.Event().wait()
        assert self.error is not None
        raise self.error


def fake_summarizer(model: FakeModel, counter: TokenCounter, breaker: CircuitBreaker) -> Summarizer:
    prompt = default_registry().get("summary")
    return Summarizer(llm=model, counter=counter, prompt=prompt, max_tokens=300, breaker=breaker)


def opened_breaker(clock: Clock) -> CircuitBreaker:
    breaker = CircuitBreaker(failures=1, cooldown=60, clock=clock)
    breaker.failed()
    assert breaker.is_open and not breaker.allow()
    return breaker


# --- a refused summary call is operator visible -----------------------------------------------------


async def test_a_refused_summary_call_is_reported_and_the_next_answer_clears_it(
    stub_llm: StubOpenAI, counter: TokenCounter
) -> None:
    summarizer, outcomes = summarizer_for(stub_llm, counter)
    refused: list[tuple[int | None, str]] = []
    accepted: list[bool] = []
    summarizer.on_refused = lambda status, detail: refused.append((status, detail))
    summarizer.on_accepted = lambda: accepted.append(True)
    stub_llm.summary_replies.append(MODEL_NOT_FOUND)
    with pytest.raises(SummaryError):
        await summarizer.fold(None, TURNS)
    assert [status for status, _ in refused] == [404] and outcomes == ["failed"] and accepted == []
    await summarizer.fold(None, TURNS)
    assert accepted == [True] and len(refused) == 1
    stub_llm.summary_replies.append(StubError(503))
    with pytest.raises(SummaryError):
        await summarizer.fold(None, TURNS)
    assert len(refused) == 1, "an outage is not a refusal: only the breaker hears of it"


async def test_the_bot_wires_summary_refusals_to_the_provider_watch(
    stub_llm: StubOpenAI, counter: TokenCounter, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings("http://127.0.0.1:9", stub_llm.base_url, None)
    provider = ProviderWatch()  # the application's watch, as build_app gives the engine
    chat = build_engine(settings, InMemoryBackend(), provider=provider)
    caplog.set_level(logging.ERROR, logger="bot.provider_health")
    stub_llm.summary_replies.append(MODEL_NOT_FOUND)
    try:
        with pytest.raises(SummaryError):
            await chat.summarizer.fold(None, TURNS)
        assert not provider.healthy, "/readyz's model_provider check"
        assert LLM_PROVIDER_REFUSING.labels("summary")._value.get() == 1
        errors = [r.getMessage() for r in caplog.records if r.name == "bot.provider_health"]
        assert len(errors) == 1 and "summary calls" in errors[0] and "SUMMARY_MODEL" in errors[0]
        await chat.summarizer.fold(None, TURNS)
        assert provider.healthy and LLM_PROVIDER_REFUSING.labels("summary")._value.get() == 0
    finally:
        provider.accepted("summary")
        await chat.close()


# --- the breaker's half-open trial always ends ------------------------------------------------------


async def test_a_cancelled_trial_lets_the_next_call_try(counter: TokenCounter) -> None:
    clock = Clock()
    breaker = opened_breaker(clock)
    model = FakeModel(hang=True)
    summarizer = fake_summarizer(model, counter, breaker)
    clock.now = 61
    assert breaker.allow()
    trial = asyncio.create_task(summarizer.fold(None, TURNS))
    await asyncio.wait_for(model.called.wait(), 5)
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial
    assert breaker.is_open and breaker.allow(), "no outcome: the next call is the trial"


async def test_a_trial_that_crashes_counts_as_failed(counter: TokenCounter) -> None:
    clock = Clock()
    breaker = opened_breaker(clock)
    summarizer = fake_summarizer(FakeModel(error=RuntimeError("a bug")), counter, breaker)
    clock.now = 61
    assert breaker.allow()
    with pytest.raises(RuntimeError):
        await summarizer.fold(None, TURNS)
    assert not breaker.allow(), "reopened for another cool-down"
    clock.now = 122
    assert breaker.allow()


def test_a_trial_nobody_reports_on_expires_after_a_cool_down() -> None:
    clock = Clock()
    breaker = opened_breaker(clock)
    clock.now = 61
    assert breaker.allow() and not breaker.allow()
    clock.now = 100
    assert not breaker.allow(), "the trial is still running"
    clock.now = 1000
    assert breaker.allow(), "a lost trial does not keep summaries off until a restart"


# --- a handoff ends while summaries fail ------------------------------------------------------------


async def stored_chat(backend: InMemoryBackend) -> None:
    messages = [NewMessage("user", "My order 7718 is late", 8), NewMessage("assistant", "Let me check.", 4)]
    await backend.store.commit_turn(CHAT, expected_version=0, messages=messages)


async def test_a_handoff_transcript_is_folded_extractively_while_summaries_fail(counter: TokenCounter) -> None:
    backend = InMemoryBackend()
    await stored_chat(backend)
    model = FakeModel(error=LLMUnavailableError("HTTP 503", status=503))
    breaker = CircuitBreaker(failures=1, cooldown=60, clock=Clock())
    memory = HandoffMemory(store=backend.store, summarizer=fake_summarizer(model, counter, breaker))
    entries = [TranscriptEntry("operator", "a replacement ships Friday, tracking 55012-1299")]
    await memory.fold_transcript(CHAT, entries, fence=None)
    session = await backend.store.load(CHAT)
    assert session.summary is not None and "55012-1299" in " ".join(session.summary.key_facts)
    assert model.calls == 1 and breaker.is_open
    await memory.fold_transcript(CHAT, [TranscriptEntry("customer", "thanks, order 8812 too")], fence=None)
    session = await backend.store.load(CHAT)
    assert session.summary is not None and "8812" in " ".join(session.summary.key_facts)
    assert model.calls == 1, "the open breaker is respected: no call"


async def test_a_ticket_while_summaries_are_off_makes_no_call_and_keeps_the_identifiers(
    counter: TokenCounter,
) -> None:
    backend = InMemoryBackend()
    await stored_chat(backend)
    model = FakeModel(error=LLMUnavailableError("HTTP 503", status=503))
    breaker = opened_breaker(Clock())
    memory = HandoffMemory(store=backend.store, summarizer=fake_summarizer(model, counter, breaker))
    summary, recent = await memory.ticket_parts(CHAT)
    assert model.calls == 0 and summary is not None and "7718" in " ".join(summary.key_facts)
    assert [m.content for m in recent] == ["My order 7718 is late", "Let me check."]
