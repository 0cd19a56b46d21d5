"""Provider prompt caching: the stub reports ``cached_tokens`` like OpenAI, the client records it, and
the chat prompt only grows at its end between compactions, so its prefix stays cacheable."""

import json
from array import array
from typing import Any

from openai import AsyncOpenAI

from services.backends.memory import InMemorySessionStore
from services.core.records import PromptPart
from services.core.tokens import TokenCounter
from services.core.turns import TurnResult
from services.llm.client import LLMClient
from tests.helpers import customer_line, make_service
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.prompt_cache import PrefixCache, PromptTokens, cacheable, common_prefix


async def noop(_result: object) -> None:
    return None


def test_cacheable_follows_openai_granularity() -> None:
    assert [cacheable(n) for n in (0, 1023, 1024, 1151, 1152, 5000)] == [0, 0, 1024, 1024, 1152, 4992]


def test_prefix_cache_reports_longest_prefix_seen_before() -> None:
    cache = PrefixCache()
    first = array("i", range(3000))
    assert cache.lookup_and_store("m", first) == 0
    assert cache.lookup_and_store("m", first) == 2944  # the last partial block is never cached
    longer = array("i", [*range(3000), *range(10_000, 12_000)])
    assert cache.lookup_and_store("m", longer) == 2944
    changed_early = array("i", [7, *range(1, 3000)])
    assert cache.lookup_and_store("m", changed_early) == 0
    assert cache.lookup_and_store("other-model", first) == 0
    diverges = array("i", [*range(1500), *range(20_000, 21_000)])
    assert cache.lookup_and_store("m", diverges) == 1408


def test_common_prefix() -> None:
    a = array("i", range(100))
    assert common_prefix(a, a) == 100
    assert common_prefix(a, array("i", [*range(57), -1])) == 57
    assert common_prefix(a, array("i")) == 0


def test_prompt_layout_bills_like_the_counter(counter: TokenCounter) -> None:
    messages = [("developer", "Be brief."), ("user", "Где мой заказ ORD-77182?")]
    assert PromptTokens(counter).billed(PromptTokens(counter).prompt(messages)) == counter.count_messages(messages)


def long_prompt(n: int) -> list[PromptPart]:
    return [PromptPart("developer", "Rules. " * 700, 0), PromptPart("user", f"question {n}", 0)]


async def test_client_records_cached_tokens_plain_and_streamed(stub_llm: StubOpenAI) -> None:
    llm = LLMClient(
        client=AsyncOpenAI(api_key="k", base_url=stub_llm.base_url, max_retries=0, timeout=5),
        chat_model="m",
        summary_model="m",
        max_output_tokens=100,
        summary_max_tokens=50,
    )
    first = await llm.chat(long_prompt(1))
    plain = await llm.chat(long_prompt(2))

    async def on_delta(_delta: str) -> None:
        return None

    streamed = await llm.chat(long_prompt(3), on_delta=on_delta)
    await llm.close()
    assert first.usage is not None and first.usage.cached_tokens == 0
    assert plain.usage is not None and streamed.usage is not None
    tokens = PromptTokens()
    one, two = (tokens.prompt((p.role, p.content) for p in long_prompt(n)) for n in (1, 2))
    expected = cacheable(common_prefix(one, two))
    assert expected >= 1024
    assert plain.usage.cached_tokens == streamed.usage.cached_tokens == expected == stub_llm.cached_tokens[1]
    assert plain.usage.prompt_tokens > plain.usage.cached_tokens


async def test_missing_usage_details_count_as_zero(stub_llm: StubOpenAI) -> None:
    stub_llm.usage_details = False
    llm = LLMClient(
        client=AsyncOpenAI(api_key="k", base_url=stub_llm.base_url, max_retries=0, timeout=5),
        chat_model="m",
        summary_model="m",
        max_output_tokens=100,
        summary_max_tokens=50,
    )
    await llm.chat(long_prompt(1))
    second = await llm.chat(long_prompt(2))
    await llm.close()
    assert stub_llm.cached_tokens[1] > 0
    assert second.usage is not None and second.usage.cached_tokens == 0 and second.usage.prompt_tokens > 0


def extends(earlier: list[dict[str, Any]], later: list[dict[str, Any]]) -> bool:
    """The earlier prompt minus its new message is a byte prefix of the later prompt, as serialized."""
    head = json.dumps(earlier[:-1], ensure_ascii=False)[:-1]
    return json.dumps(later, ensure_ascii=False).startswith(head)


def ordinary_pairs(results: list[TurnResult]) -> list[int]:
    """Indexes of turns whose prompt should extend the previous one: no compaction in between."""
    after = {i + 1 for i, r in enumerate(results) if r.proactive_compaction}
    after |= {i for i, r in enumerate(results) if r.forced_compaction}
    return [i for i in range(1, len(results)) if i not in after]


async def test_consecutive_ordinary_turns_extend_the_prompt(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    """Between compactions (summary present or not) every prompt is the previous one plus the previous
    reply and the new message; the stub, seeing the prefix again, reports it cached."""
    service = make_service(store=InMemorySessionStore(), llm=llm, counter=counter, budget=4000)
    results = [await service.handle(3, customer_line(n), deliver=noop) for n in range(60)]
    prompts = [r["messages"] for r in stub_llm.chat_requests]
    assert sum(1 for r in results if r.summary_updated) >= 2, "the run must cross compactions"
    summary_seen = False
    for index in ordinary_pairs(results):
        earlier, later = prompts[index - 1], prompts[index]
        assert extends(earlier, later), f"turn {index} broke the prompt prefix"
        assert later[: len(earlier)] == earlier, "the new message becomes history verbatim"
        summary_seen = summary_seen or "<conversation_summary>" in later[1]["content"]
        usage = results[index].usage
        assert usage is not None
        prefix = counter.count_messages([(m["role"], m["content"]) for m in earlier]) - 3
        assert usage.cached_tokens == cacheable(prefix)
    assert summary_seen, "ordinary turns with a summary were checked too"
    assert sum(r.usage.cached_tokens for r in results if r.usage) > 0


async def test_window_never_slides_between_compactions(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    """The window drops oldest turns only when history + new message exceed the budget; the default
    water marks compact the stored history long before that (the room reserves the whole summary
    cap and HIGH leaves space for a message), so with messages of very different sizes no turn
    sends a shifted history and no reply waits for a forced compaction."""
    service = make_service(store=InMemorySessionStore(), llm=llm, counter=counter, budget=4000)
    sizes = [1, 6, 2, 9, 1, 1, 3, 1, 7]
    results = []
    for n in range(80):
        text = " ".join([customer_line(n)] * sizes[n % len(sizes)])
        results.append(await service.handle(4, text, deliver=noop))
    prompts = [r["messages"] for r in stub_llm.chat_requests]
    assert all(r.removed_history_messages == 0 and r.forced_compaction is None for r in results)
    assert sum(1 for r in results if r.summary_updated) >= 5
    for index in ordinary_pairs(results):
        assert extends(prompts[index - 1], prompts[index]), f"turn {index} broke the prompt prefix"
