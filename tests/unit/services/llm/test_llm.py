import json

import openai
import pytest
from openai import AsyncOpenAI

from services.core.errors import LLMBadReplyError, LLMConfigurationError, LLMIncompleteReplyError, LLMUnavailableError
from services.core.records import PromptPart
from services.core.summary_state import SummaryState
from services.engine.builders import build_llm_client
from services.llm.client import LLMClient
from services.settings import LLMSettings, MemorySettings
from tests.conftest import free_port
from tests.stubs.openai_server import (
    INVALID_API_KEY,
    MODEL_NOT_FOUND,
    SERVER_ERROR,
    StubBroken,
    StubError,
    StubOpenAI,
    rate_limited,
)

PROMPT = [PromptPart("developer", "be nice", 0), PromptPart("user", "hi", 0)]


def client_for(url: str, **kwargs: object) -> LLMClient:
    return LLMClient(
        client=AsyncOpenAI(api_key="k", base_url=url, max_retries=0, timeout=5),
        chat_model="chat-m",
        summary_model="sum-m",
        max_output_tokens=100,
        summary_max_tokens=50,
        **kwargs,  # type: ignore[arg-type]
    )


async def test_chat_request_shape(stub_llm: StubOpenAI) -> None:
    llm = client_for(stub_llm.base_url, token_limit_param="max_tokens", temperature=0.2)
    completion = await llm.chat(PROMPT)
    body = stub_llm.requests[-1]
    assert body["model"] == "chat-m" and body["max_tokens"] == 100 and body["temperature"] == 0.2
    assert body["messages"][0] == {"role": "developer", "content": "be nice"}
    assert completion.finish_reason == "stop" and completion.usage is not None


async def test_each_chat_gets_its_own_stable_prompt_cache_key_that_hides_its_id(stub_llm: StubOpenAI) -> None:
    llm = client_for(stub_llm.base_url, cache_key_secret=b"secret")
    for chat_id in (424242, 424242, 7):
        await llm.chat(PROMPT, chat_id=chat_id)
    keys = [body["prompt_cache_key"] for body in stub_llm.requests[-3:]]
    assert keys[0] == keys[1] != keys[2] and not any("424242" in k or k == "7" for k in keys)
    other_worker = client_for(stub_llm.base_url, cache_key_secret=b"secret")
    assert other_worker.prompt_cache_key(424242) == keys[0], "every worker sends the same key"
    assert client_for(stub_llm.base_url, cache_key_secret=b"another bot").prompt_cache_key(424242) != keys[0]
    await client_for(stub_llm.base_url).chat(PROMPT, chat_id=424242)
    assert "prompt_cache_key" not in stub_llm.requests[-1], "no secret: no key"


@pytest.mark.parametrize(
    ("mode", "base_url", "sends"),
    [
        ("auto", None, True),
        ("auto", "https://api.openai.com/v1", True),
        ("auto", "http://localhost:8000/v1", False),
        ("auto", "https://openrouter.ai/api/v1", False),
        ("on", "http://localhost:8000/v1", True),
        ("off", None, False),
    ],
)
def test_the_prompt_cache_key_goes_to_openai_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, mode: str, base_url: str | None, sends: bool
) -> None:
    monkeypatch.setenv("OPENAI_PROMPT_CACHE_KEY", mode)
    if base_url:
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    else:
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert LLMSettings(_env_file=None).sends_prompt_cache_key is sends  # type: ignore[call-arg]


async def test_summary_uses_json_schema_and_summary_model(stub_llm: StubOpenAI) -> None:
    llm = client_for(stub_llm.base_url)
    await llm.summarize(PROMPT, schema=SummaryState.json_schema_for_llm())
    body = stub_llm.requests[-1]
    assert body["model"] == "sum-m"
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["max_completion_tokens"] == 100
    llm = client_for(stub_llm.base_url, summary_response_format="json_object")
    await llm.summarize(PROMPT, schema={})
    assert stub_llm.requests[-1]["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_provider_errors_are_unavailable(stub_llm: StubOpenAI, status: int) -> None:
    stub_llm.chat_replies.append(status)
    with pytest.raises(LLMUnavailableError):
        await client_for(stub_llm.base_url).chat(PROMPT)


async def test_bad_request_is_a_bad_reply(stub_llm: StubOpenAI) -> None:
    stub_llm.chat_replies.append(400)
    with pytest.raises(LLMBadReplyError, match="400"):
        await client_for(stub_llm.base_url).chat(PROMPT)


async def test_unreachable_server_is_unavailable() -> None:
    with pytest.raises(LLMUnavailableError):
        await client_for(f"http://127.0.0.1:{free_port()}/v1").chat(PROMPT)


async def test_retries_with_backoff_then_succeeds(stub_llm: StubOpenAI) -> None:
    from services.core.retry import RetryPolicy

    stub_llm.chat_replies.extend([503, 503])
    llm = client_for(stub_llm.base_url, retry=RetryPolicy(max_retries=2, base_seconds=0.01, max_seconds=0.02))
    completion = await llm.chat(PROMPT)
    assert completion.text and len(stub_llm.requests) == 3


@pytest.mark.parametrize("streamed", [False, True])
async def test_tools_are_offered_and_a_tool_call_is_reported(stub_llm: StubOpenAI, streamed: bool) -> None:
    from prompts.support_chat import HANDOFF_TOOL, HANDOFF_TOOL_SPEC
    from tests.stubs.openai_server import tool_reply

    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    stub_llm.chat_replies.append(tool_reply(HANDOFF_TOOL, reason="the customer wants a refund decision"))
    llm = client_for(stub_llm.base_url)
    completion = await llm.chat(PROMPT, tools=[HANDOFF_TOOL_SPEC], on_delta=on_delta if streamed else None)
    assert stub_llm.requests[-1]["tools"][0]["function"]["name"] == HANDOFF_TOOL
    assert completion.tool_call is not None and completion.tool_call.name == HANDOFF_TOOL
    assert json.loads(completion.tool_call.arguments) == {"reason": "the customer wants a refund decision"}
    assert completion.finish_reason == "tool_calls" and deltas == []
    await llm.chat(PROMPT)
    assert "tools" not in stub_llm.requests[-1], "no tools unless asked"


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_both_http_transports_stream_a_reply(stub_llm: StubOpenAI, transport: str) -> None:
    settings = LLMSettings(
        _env_file=None,
        openai_api_key="sk-test",
        openai_base_url=stub_llm.base_url,  # type: ignore[call-arg]
        openai_http_client=transport,  # type: ignore[arg-type]
    )
    llm = build_llm_client(settings, MemorySettings(_env_file=None))  # type: ignore[call-arg]
    inner = type(llm._client._client).__name__.lower()  # the http client under the SDK
    # openai releases before DefaultAioHttpClient (the lowest-versions step) fall back to httpx
    assert ("aiohttp" in inner) == (transport == "aiohttp" and hasattr(openai, "DefaultAioHttpClient")), inner
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    completion = await llm.chat([PromptPart("user", "hello there", 3)], on_delta=on_delta)
    assert completion.text and deltas
    await llm.close()


# --- provider faults at the edge of the client (issue 26) ---------------------------------------------


def transport_client(url: str, transport: str, **kwargs: object) -> LLMClient:
    if transport == "aiohttp" and not hasattr(openai, "DefaultAioHttpClient"):
        pytest.skip("this openai release has no aiohttp transport (the lowest-versions step)")
    http_client = openai.DefaultAioHttpClient(timeout=5) if transport == "aiohttp" else None
    return LLMClient(
        client=AsyncOpenAI(api_key="k", base_url=url, max_retries=0, timeout=5, http_client=http_client),
        chat_model="chat-m",
        summary_model="sum-m",
        max_output_tokens=100,
        summary_max_tokens=50,
        **kwargs,  # type: ignore[arg-type]
    )


async def ignore(_text: str) -> None:
    pass


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
@pytest.mark.parametrize("streamed", [True, False])
@pytest.mark.parametrize("fault", ["no_finish", "cut", "malformed", "bad_utf8"])
async def test_a_reply_broken_on_the_wire_is_one_kind_of_error(
    stub_llm: StubOpenAI, transport: str, streamed: bool, fault: str
) -> None:
    """A stream (or body) without a finish reason, cut before its end, with a chunk that is not JSON or
    not UTF-8: never an answer, always LLMIncompleteReplyError (not JSONDecodeError, not a plain
    "unreachable"); and the next call works."""
    stub_llm.chat_replies.append(StubBroken("Your order 7718 has been ship", fault))  # type: ignore[arg-type]
    llm = transport_client(stub_llm.base_url, transport)
    with pytest.raises(LLMIncompleteReplyError) as caught:
        await llm.chat(PROMPT, on_delta=ignore if streamed else None)
    assert caught.value.requests == 1
    completion = await llm.chat(PROMPT, on_delta=ignore if streamed else None)
    assert completion.text.startswith("Support answer to:")
    await llm.close()


@pytest.mark.parametrize(
    "body",
    [
        {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": "x"}},
        {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": [1]}},
        {"choices": [{"message": {"content": "hi", "tool_calls": [{"function": "x"}]}, "finish_reason": "stop"}]},
        {"choices": [{"message": {"content": "hi", "tool_calls": "x"}, "finish_reason": "stop"}], "usage": 3},
    ],
)
async def test_odd_fields_of_an_answer_are_read_without_raising(stub_llm: StubOpenAI, body: dict) -> None:
    stub_llm.chat_replies.append(StubError(200, body=body))
    completion = await client_for(stub_llm.base_url).chat(PROMPT)
    assert completion.text == "hi" and completion.finish_reason == "stop"


@pytest.mark.parametrize(
    "body",
    [
        [1, 2],
        {"choices": "x"},
        {"choices": [{"message": "hi", "finish_reason": "stop"}]},
        {"choices": [{"message": {"content": "hi"}, "finish_reason": 7}]},
        "<html>502 Bad Gateway</html>",
    ],
)
async def test_an_unreadable_answer_is_incomplete(stub_llm: StubOpenAI, body: object) -> None:
    """A body without a readable choice and finish reason (a proxy's HTML page, an odd shape)."""
    stub_llm.chat_replies.append(StubError(200, body=body))  # type: ignore[arg-type]
    with pytest.raises(LLMIncompleteReplyError):
        await client_for(stub_llm.base_url).chat(PROMPT)


@pytest.mark.parametrize(
    ("error", "kind"),
    [(INVALID_API_KEY, LLMConfigurationError), (MODEL_NOT_FOUND, LLMConfigurationError)],
)
async def test_configuration_errors_keep_their_kind(stub_llm: StubOpenAI, error: StubError, kind: type) -> None:
    stub_llm.chat_replies.append(error)
    with pytest.raises(kind, match=str(error.status)) as caught:
        await client_for(stub_llm.base_url).chat(PROMPT, on_delta=ignore)
    assert caught.value.status == error.status and caught.value.requests == 1


@pytest.mark.parametrize(
    ("error", "wait"),
    [
        (rate_limited(retry_after="7"), 7.0),
        (rate_limited(retry_after_ms="2500"), 2.5),
        (rate_limited(retry_after="7", retry_after_ms="2500"), 2.5),
        (SERVER_ERROR, None),
    ],
)
async def test_the_providers_wait_is_kept(stub_llm: StubOpenAI, error: StubError, wait: float | None) -> None:
    stub_llm.chat_replies.append(error)
    with pytest.raises(LLMUnavailableError) as caught:
        await client_for(stub_llm.base_url).chat(PROMPT)
    assert caught.value.status == error.status
    assert caught.value.retry_after == (pytest.approx(wait) if wait is not None else None)
