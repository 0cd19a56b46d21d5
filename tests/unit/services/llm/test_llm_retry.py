"""The one retry policy of a model call (issue 26): the provider's Retry-After / retry-after-ms first,
equal-jitter backoff, an attempts cap, a per-call deadline, a process-wide not-before gate, and the
SDK's own retries off. Against the stub model server through a real AsyncOpenAI."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from email.utils import formatdate

import pytest
from openai import AsyncOpenAI

from services.core.errors import LLMConfigurationError, LLMIncompleteReplyError, LLMUnavailableError
from services.core.records import PromptPart
from services.core.retry import REQUEST_BUDGET, RequestBudget, RetryPolicy, retry_after_of
from services.engine.builders import build_llm_client
from services.llm.client import LLMClient, NotBefore
from services.settings import LLMSettings, MemorySettings
from tests.stubs.openai_server import INVALID_API_KEY, SERVER_ERROR, StubBroken, StubOpenAI, rate_limited

PROMPT = [PromptPart("user", "hi", 0)]
FAST = RetryPolicy(max_retries=3, base_seconds=0.01, max_seconds=0.05, in_call_max_wait_seconds=10, deadline_seconds=30)


def client_for(url: str, retry: RetryPolicy = FAST) -> LLMClient:
    return LLMClient(
        client=AsyncOpenAI(api_key="k", base_url=url, max_retries=0, timeout=5),
        chat_model="m",
        summary_model="m",
        max_output_tokens=10,
        summary_max_tokens=10,
        retry=retry,
    )


def gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


async def ignore(_text: str) -> None:
    pass


def test_equal_jitter_backoff_stays_in_its_band() -> None:
    policy = RetryPolicy(max_retries=10, base_seconds=1, max_seconds=120, in_call_max_wait_seconds=10)
    rng = random.Random(7)
    for attempt in range(12):
        ceiling = min(120.0, 2.0**attempt)
        waits = [policy.backoff(attempt, rng.random) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits), attempt
        assert max(waits) - min(waits) > ceiling / 4, "jittered"
    assert policy.wait(0, retry_after=30.0, rand=rng.random) == 30.0, "never sooner than the provider asked"
    assert 0.5 <= policy.wait(0, retry_after=0.1, rand=rng.random) <= 1.0


def test_retry_after_in_seconds_milliseconds_or_an_http_date() -> None:
    now = time.time()
    assert retry_after_of({"retry-after": "3"}) == 3.0
    assert retry_after_of({"retry-after-ms": "250", "retry-after": "3"}) == 0.25
    assert retry_after_of({"retry-after": formatdate(now + 20, usegmt=True)}, now=now) == pytest.approx(20, abs=1)
    assert retry_after_of({"retry-after": "soon"}) is None and retry_after_of({}) is None


MALFORMED_MS = ["nan", "NaN", "inf", "-inf", "-1", "abc", "", "1e400", "7_000"]


@pytest.mark.parametrize("bad", MALFORMED_MS)
def test_a_malformed_retry_after_ms_falls_through_to_retry_after(bad: str) -> None:
    """Issue 36: ``retry-after-ms: nan`` beside ``retry-after: 7`` dropped the provider's wait (NaN was
    read as "none"), ``inf`` became the 600 s ceiling and ``-1`` no wait at all."""
    assert retry_after_of({"retry-after-ms": bad, "retry-after": "7"}) == 7.0
    assert retry_after_of({"retry-after-ms": bad}) is None


@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "abc", "", "1e400"])
def test_a_malformed_retry_after_is_no_wait_given(bad: str) -> None:
    assert retry_after_of({"retry-after": bad}) is None
    assert retry_after_of({"retry-after-ms": "1500", "retry-after": bad}) == 1.5


@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "abc", ""])
async def test_the_call_keeps_the_provider_s_wait_beside_a_malformed_ms(stub_llm: StubOpenAI, bad: str) -> None:
    """End to end through the SDK: the 7 s of ``retry-after`` is handed to the caller and held by the
    process-wide gate (a fake clock: nothing sleeps), whatever ``retry-after-ms`` says."""
    now = [1000.0]
    gate = NotBefore(clock=lambda: now[0])
    stub_llm.chat_replies.append(rate_limited(retry_after="7", retry_after_ms=bad))
    policy = RetryPolicy(max_retries=3, base_seconds=0.01, max_seconds=0.01, in_call_max_wait_seconds=1)
    llm = LLMClient(
        client=AsyncOpenAI(api_key="k", base_url=stub_llm.base_url, max_retries=0, timeout=5),
        chat_model="m",
        summary_model="m",
        max_output_tokens=10,
        summary_max_tokens=10,
        retry=policy,
        gate=gate,
    )
    with pytest.raises(LLMUnavailableError) as caught:
        await llm.chat(PROMPT)
    assert caught.value.retry_after == 7.0 and caught.value.requests == 1
    assert gate.remaining() == 7.0
    now[0] += 6.5
    assert gate.remaining() == pytest.approx(0.5)


async def test_retry_after_one_second_is_waited(stub_llm: StubOpenAI) -> None:
    """Regression: a 429 with Retry-After: 1 was retried after 0.22 s, 0.41 s, 0.82 s."""
    stub_llm.chat_replies.extend([rate_limited(retry_after="1"), rate_limited(retry_after_ms="300")])
    completion = await client_for(stub_llm.base_url).chat(PROMPT)
    assert completion.text
    first, second = gaps(stub_llm.request_times)
    assert first >= 1.0 and 0.3 <= second < 1.0, (first, second)


async def test_a_persistent_429_makes_at_most_the_capped_requests(stub_llm: StubOpenAI) -> None:
    stub_llm.always = rate_limited(retry_after_ms="20")
    with pytest.raises(LLMUnavailableError) as caught:
        await client_for(stub_llm.base_url).chat(PROMPT)
    assert len(stub_llm.requests) == 4 == caught.value.requests, "1 + max_retries, and the error says so"
    assert caught.value.retry_after == pytest.approx(0.02)
    assert all(gap >= 0.02 for gap in gaps(stub_llm.request_times))


async def test_a_question_s_remaining_request_budget_ends_the_retries(stub_llm: StubOpenAI) -> None:
    """The queue worker hands the call what is left of LLM_MAX_REQUESTS_PER_QUESTION: it makes no more."""
    stub_llm.always = rate_limited(retry_after_ms="10")
    budget = RequestBudget(cap=2)
    token = REQUEST_BUDGET.set(budget)
    try:
        with pytest.raises(LLMUnavailableError) as caught:
            await client_for(stub_llm.base_url).chat(PROMPT)
    finally:
        REQUEST_BUDGET.reset(token)
    assert len(stub_llm.requests) == 2 == caught.value.requests == budget.made


async def test_every_request_of_a_question_is_counted_on_its_budget(stub_llm: StubOpenAI) -> None:
    """Answered ones and summary calls too (review 26: only a failing call's requests were counted, so
    an attempt that failed after its model calls answered gave the next one the whole cap again)."""
    stub_llm.chat_replies.extend([503])
    budget = RequestBudget(cap=10)
    token = REQUEST_BUDGET.set(budget)
    try:
        llm = client_for(stub_llm.base_url)
        await llm.chat(PROMPT)
        await llm.summarize(PROMPT, schema={"type": "object"})
    finally:
        REQUEST_BUDGET.reset(token)
    assert budget.made == len(stub_llm.requests) == 3


async def test_a_long_retry_after_is_not_slept_in_the_call(stub_llm: StubOpenAI) -> None:
    """A wait beyond LLM_RETRY_IN_CALL_MAX_WAIT_SECONDS is handed to the caller (the worker re-queues);
    meanwhile no other call of this process asks the provider (the not-before gate)."""
    stub_llm.chat_replies.append(rate_limited(retry_after="30"))
    llm = client_for(stub_llm.base_url)
    started = time.monotonic()
    with pytest.raises(LLMUnavailableError) as caught:
        await llm.chat(PROMPT)
    assert caught.value.retry_after == pytest.approx(30) and caught.value.requests == 1
    with pytest.raises(LLMUnavailableError) as gated:
        await llm.chat(PROMPT, on_delta=ignore)
    assert gated.value.requests == 0 and 28 < (gated.value.retry_after or 0) <= 30
    assert len(stub_llm.requests) == 1 and time.monotonic() - started < 15  # neither call waited the 30 s


async def test_a_retry_after_makes_the_other_calls_of_the_process_wait(stub_llm: StubOpenAI) -> None:
    stub_llm.chat_replies.append(rate_limited(retry_after_ms="500"))
    llm = client_for(stub_llm.base_url, RetryPolicy(max_retries=0, base_seconds=0.01, max_seconds=0.01))
    with pytest.raises(LLMUnavailableError):
        await llm.chat(PROMPT)
    results = await asyncio.gather(llm.chat(PROMPT), llm.chat(PROMPT, on_delta=ignore))
    assert all(r.text for r in results)
    assert all(t - stub_llm.request_times[0] >= 0.5 for t in stub_llm.request_times[1:]), gaps(stub_llm.request_times)


async def test_the_deadline_ends_the_retries(stub_llm: StubOpenAI) -> None:
    stub_llm.always = SERVER_ERROR
    # 50 retries would be 51 requests; the 1 s deadline allows at most 21 (each wait, with equal
    # jitter, 0.05-0.1 s). Counted in requests, not seconds: a busy machine makes requests slower,
    # never more of them.
    policy = RetryPolicy(max_retries=50, base_seconds=0.1, max_seconds=0.1, deadline_seconds=1.0)
    with pytest.raises(LLMUnavailableError) as caught:
        await client_for(stub_llm.base_url, policy).chat(PROMPT)
    assert 2 <= caught.value.requests <= 21, caught.value.requests


async def test_configuration_errors_are_not_retried(stub_llm: StubOpenAI) -> None:
    stub_llm.always = INVALID_API_KEY
    with pytest.raises(LLMConfigurationError) as caught:
        await client_for(stub_llm.base_url).chat(PROMPT)
    assert caught.value.requests == 1 == len(stub_llm.requests)


async def test_a_broken_reply_is_retried_unless_text_was_already_passed_on(stub_llm: StubOpenAI) -> None:
    """Before any delta reached the customer (a draft), a broken reply is asked again in the call;
    after, the call fails (a retry would stream a second text over the first)."""
    llm = client_for(stub_llm.base_url)
    stub_llm.chat_replies.append(StubBroken("", "malformed"))
    assert (await llm.chat(PROMPT, on_delta=ignore)).text and len(stub_llm.requests) == 2
    stub_llm.chat_replies.append(StubBroken("half an answ", "cut"))
    with pytest.raises(LLMIncompleteReplyError) as caught:
        await llm.chat(PROMPT, on_delta=ignore)
    assert caught.value.requests == 1 and len(stub_llm.requests) == 3
    stub_llm.chat_replies.append(StubBroken("half an answ", "no_finish"))
    assert (await llm.chat(PROMPT)).text.startswith("Support answer"), "not streamed: nothing was shown"


async def test_the_built_client_retries_by_this_policy_only(stub_llm: StubOpenAI) -> None:
    """OPENAI_MAX_RETRIES counts our retries; the SDK's own are off (it would multiply them)."""
    settings = LLMSettings(
        _env_file=None,
        openai_api_key="sk-test",
        openai_base_url=stub_llm.base_url,  # type: ignore[call-arg]
        openai_max_retries=2,
        llm_retry_base_seconds=0.01,
        llm_retry_max_seconds=0.02,
    )
    llm = build_llm_client(settings, MemorySettings(_env_file=None))  # type: ignore[call-arg]
    stub_llm.always = rate_limited(retry_after_ms="10")
    with pytest.raises(LLMUnavailableError) as caught:
        await llm.chat(PROMPT)
    assert len(stub_llm.requests) == 3 == caught.value.requests
    await llm.close()
