"""A refusal ends when the provider accepts a model call again: the client reports each accepted
request, and while a call kind is refused a 1-token probe asks every few seconds, so the watch clears
without customer traffic. A turn that made no model call clears nothing. Configuration problems sent
as 400 and failed finish reasons are classified at the client's edge."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from bot.backends import build_backend
from bot.factory import build_engine
from bot.provider_health import ProviderWatch, probe_while_refused
from services.core.errors import LLMConfigurationError, LLMIncompleteReplyError, LLMRequestRejectedError
from services.llm.client import LLMClient
from tests.e2e.harness import make_settings
from tests.e2e.waiting import eventually
from tests.stubs.openai_server import INVALID_API_KEY, MODEL_NOT_FOUND, StubError, StubOpenAI, insufficient_quota
from tests.unit.services.llm.test_llm import PROMPT, client_for, ignore


@pytest.fixture
async def client(stub_llm: StubOpenAI) -> AsyncIterator[LLMClient]:
    llm = client_for(stub_llm.base_url)
    yield llm
    await llm.close()


@pytest.mark.parametrize("code", ["invalid_api_key", "model_not_found", "insufficient_quota"])
async def test_a_configuration_problem_sent_as_400_is_a_refusal(
    client: LLMClient, stub_llm: StubOpenAI, code: str
) -> None:
    stub_llm.chat_replies.append(StubError(400, code=code, type="invalid_request_error"))
    with pytest.raises(LLMConfigurationError, match=code) as caught:
        await client.chat(PROMPT)
    assert caught.value.status == 400


async def test_a_plain_400_stays_the_requests_fault(client: LLMClient, stub_llm: StubOpenAI) -> None:
    stub_llm.chat_replies.append(StubError(400, code="context_length_exceeded", type="invalid_request_error"))
    with pytest.raises(LLMRequestRejectedError):
        await client.chat(PROMPT)


async def test_insufficient_quota_is_a_refusal(client: LLMClient, stub_llm: StubOpenAI) -> None:
    stub_llm.chat_replies.append(insufficient_quota())
    with pytest.raises(LLMConfigurationError) as caught:
        await client.chat(PROMPT)
    assert caught.value.status == 429 and caught.value.requests == 1


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("finish", ["error", "abort", "eos_whatever"])
async def test_a_failed_finish_reason_is_an_incomplete_answer(
    client: LLMClient, stub_llm: StubOpenAI, streamed: bool, finish: str
) -> None:
    stub_llm.chat_replies.append(f"<<finish:{finish}>>Your order 7718 has been ship")
    with pytest.raises(LLMIncompleteReplyError, match=finish):
        await client.chat(PROMPT, on_delta=ignore if streamed else None)


@pytest.mark.parametrize("finish", ["function_call", "eos_token", "end_turn"])
async def test_the_end_of_sequence_names_of_compatible_servers_are_complete(
    client: LLMClient, stub_llm: StubOpenAI, finish: str
) -> None:
    """Legacy OpenAI function calls, TGI's ``eos_token``, Anthropic-style proxies' ``end_turn``."""
    stub_llm.chat_replies.append(f"<<finish:{finish}>>the answer")
    assert (await client.chat(PROMPT)).text == "the answer"


async def test_the_client_reports_each_call_the_provider_accepted(client: LLMClient, stub_llm: StubOpenAI) -> None:
    accepted: list[str] = []
    client.on_accepted = accepted.append
    await client.chat(PROMPT)
    await client.chat(PROMPT, on_delta=ignore)
    await client.summarize(PROMPT, schema={"type": "object"})
    assert accepted == ["chat", "chat", "summary"]
    stub_llm.chat_replies.append(INVALID_API_KEY)
    with pytest.raises(LLMConfigurationError):
        await client.chat(PROMPT)
    assert accepted == ["chat", "chat", "summary"]


async def test_a_probe_is_a_one_token_completion_of_the_calls_model(client: LLMClient, stub_llm: StubOpenAI) -> None:
    accepted: list[str] = []
    client.on_accepted = accepted.append
    await client.probe("chat")
    await client.probe("summary")
    assert [r["model"] for r in stub_llm.requests] == ["chat-m", "sum-m"]
    assert all(r["max_completion_tokens"] == 1 and "stream" not in r for r in stub_llm.requests)
    assert accepted == ["chat", "summary"]
    stub_llm.chat_replies.append(MODEL_NOT_FOUND)  # a model the key cannot use is caught too
    with pytest.raises(LLMConfigurationError):
        await client.probe("chat")
    assert accepted == ["chat", "summary"]


async def test_while_refused_the_provider_is_probed_until_it_accepts(client: LLMClient, stub_llm: StubOpenAI) -> None:
    registry = CollectorRegistry()
    watch = ProviderWatch(
        refusing=Gauge("refusing", "", ["call"], registry=registry),
        refusals=Counter("refusals", "", ["call", "status"], registry=registry),
    )
    client.on_accepted = watch.accepted
    task = asyncio.create_task(probe_while_refused(watch, client, every=0.05))
    try:
        stub_llm.always = insufficient_quota()
        watch.refused("chat", 429, "HTTP 429 insufficient_quota")

        async def probed_twice() -> bool:
            return len(stub_llm.requests) >= 2

        await eventually(probed_twice, within=3, what="two probes")
        assert not watch.healthy and registry.get_sample_value("refusing", {"call": "chat"}) == 1
        stub_llm.always = None  # credit added: no customer writes, the probe notices

        async def cleared() -> bool:
            return watch.healthy

        await eventually(cleared, within=3, what="the watch to clear")
        assert registry.get_sample_value("refusing", {"call": "chat"}) == 0
        assert not task.done()
    finally:
        task.cancel()


async def test_a_turn_without_a_model_call_does_not_clear_a_refusal(stub_llm: StubOpenAI) -> None:
    """A redelivered update already answered is a turn the observer sees, but the provider was not
    asked: the refusal stays."""
    settings = make_settings("http://127.0.0.1:9", stub_llm.base_url, None)
    provider = ProviderWatch()  # the application's watch, as build_app gives the engine
    chat = build_engine(settings, build_backend(settings), provider=provider)

    async def deliver(_result: object) -> None:
        return None

    try:
        provider.refused("chat", 401, "HTTP 401")
        await chat.handle(4242, "hello", deliver=deliver, turn_id="7")
        assert provider.healthy, "an answered model call clears the refusal"
        provider.refused("chat", 401, "HTTP 401")
        result = await chat.handle(4242, "hello", deliver=deliver, turn_id="7")
        assert result.duplicate and len(stub_llm.chat_requests) == 1
        assert not provider.healthy
    finally:
        provider.accepted("chat")
        await chat.close()
