"""OPENAI_INSTRUCTION_ROLE / OPENAI_TOKEN_LIMIT_PARAM ``auto`` (issue 36): OpenAI's own API keeps
developer + max_completion_tokens, any other server starts with system + max_tokens, and a refusal
naming the value in use switches it once per process with one INFO line; an error body naming the
role, the parameter or the response format is a refusal of that feature, not an outage. The rules on
their own, then through a real AsyncOpenAI against a stub that answers as llama-cpp-python's server."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import openai
import pytest

from prompts import default_registry
from services.core.errors import LLMUnavailableError, ResponseFormatRejectedError
from services.core.records import PromptPart, StoredMessage
from services.core.retry import RetryPolicy
from services.core.tokens import TokenCounter
from services.llm.dialect import Dialect, FeatureRefusedError, Refusal, is_openai_api, refusal_of
from services.memory.breaker import CircuitBreaker
from services.memory.summarizer import Summarizer
from services.settings import LLMSettings
from tests.stubs import llama_cpp
from tests.stubs.openai_server import StubOpenAI
from tests.unit.services.llm.test_llm import client_for

RETRIES = RetryPolicy(max_retries=3, base_seconds=0.01, max_seconds=0.01)
INSTRUCTION = PromptPart("system", "You are the support assistant.", 0)
PROMPT = [INSTRUCTION, PromptPart("user", "hi", 0)]


def status_error(status: int, body: Any) -> openai.APIStatusError:
    """The SDK's own error for an HTTP answer (as its client builds it: ``body`` is the ``error`` object)."""
    request = httpx.Request("POST", "http://server.test/v1/chat/completions")
    response = httpx.Response(status, json=body, request=request)
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message") if isinstance(error, dict) else None
    return openai.APIStatusError(f"Error code: {status} - {message}", response=response, body=error)


def sent(role: str = "system", limit: str = "max_tokens", **extra: Any) -> dict[str, Any]:
    messages = [{"role": role, "content": "x"}, {"role": "user", "content": "hi"}]
    return {"model": "m", "messages": messages, limit: 9, **extra}


def llama_error(body: dict[str, Any]) -> openai.APIStatusError:
    refused = llama_cpp.refusal(body)
    assert refused is not None, "the llama-cpp-python stand-in accepts this"
    return status_error(*refused)


@pytest.mark.parametrize(
    ("url", "openai_api"),
    [
        (None, True),
        ("", True),
        ("https://api.openai.com/v1", True),
        (" HTTPS://API.OPENAI.COM/v1/ ", True),
        ("http://127.0.0.1:8000/v1", False),
        ("http://localhost:11434/v1", False),
        ("https://my-res.openai.azure.com/openai/v1/", False),
        ("https://api.openai.com.evil.example/v1", False),
        ("https://openrouter.ai/api/v1", False),
    ],
)
def test_openai_s_own_api_is_its_host(url: str | None, openai_api: bool) -> None:
    assert is_openai_api(url) is openai_api


def test_auto_starts_with_what_the_endpoint_takes_and_a_setting_is_kept() -> None:
    openai_api = Dialect(instruction_role="auto", token_limit_param="auto", base_url=None)
    assert (openai_api.role, openai_api.token_limit_param) == ("developer", "max_completion_tokens")
    local = Dialect(instruction_role="auto", token_limit_param="auto", base_url="http://127.0.0.1:8080/v1")
    assert (local.role, local.token_limit_param) == ("system", "max_tokens")
    fixed = Dialect(instruction_role="developer", token_limit_param="max_completion_tokens", base_url="http://h/v1")
    assert (fixed.role, fixed.token_limit_param) == ("developer", "max_completion_tokens")
    settings = LLMSettings(_env_file=None)  # type: ignore[call-arg]
    assert (settings.openai_instruction_role, settings.openai_token_limit_param) == ("auto", "auto")


def test_llama_cpp_python_s_500_names_the_role_and_the_response_format() -> None:
    """The body its RouteErrorHandler sends for FastAPI's validation error (tests.stubs.llama_cpp)."""
    role = refusal_of(llama_error(sent("developer")), sent("developer"))
    assert role == Refusal("instruction_role", "developer", 500)
    body = sent(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": {}}})
    assert refusal_of(llama_error(body), body) == Refusal("response_format", "json_schema", 500)
    assert llama_cpp.refusal(sent(limit="max_completion_tokens")) is None, "ignored, not refused"


@pytest.mark.parametrize(
    ("status", "error", "body", "expected"),
    [
        (  # OpenAI, a reasoning model
            400,
            {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
             "'max_completion_tokens' instead.", "type": "invalid_request_error", "param": "max_tokens",
             "code": "unsupported_parameter"},
            sent(),
            Refusal("token_limit_param", "max_tokens", 400),
        ),
        (  # an older Azure API version
            400,
            {"message": "Unrecognized request argument supplied: max_completion_tokens", "code": None},
            sent(limit="max_completion_tokens"),
            Refusal("token_limit_param", "max_completion_tokens", 400),
        ),
        (  # OpenAI's o1-mini
            400,
            {"message": "Unsupported value: 'messages[0].role' does not support 'system' with this model.",
             "param": "messages[0].role", "code": "unsupported_value"},
            sent(),
            Refusal("instruction_role", "system", 400),
        ),
        (  # a chat template without a system turn (a 500 from the template engine)
            500,
            {"message": "System role not supported", "type": "internal_server_error"},
            sent(),
            Refusal("instruction_role", "system", 500),
        ),
        (  # OpenAI's 400 for a format the model lacks (param only)
            400,
            {"message": "Invalid parameter.", "param": "response_format"},
            sent(response_format={"type": "json_schema"}),
            Refusal("response_format", "json_schema", 400),
        ),
    ],
)  # fmt: skip
def test_refusals_of_other_servers(status: int, error: dict[str, Any], body: dict[str, Any], expected: Refusal) -> None:
    assert refusal_of(status_error(status, {"error": error}), body) == expected


@pytest.mark.parametrize(
    ("status", "message", "body"),
    [
        (500, "stub error", sent()),  # an outage
        (503, "The server is overloaded", sent(response_format={"type": "json_object"})),
        (400, "max_tokens is too large: 99999. This model supports at most 16384 completion tokens", sent()),
        (429, "Unsupported value: role 'system' ... rate limit reached", sent()),  # a 429 is a rate limit
        (401, "invalid api key; unsupported role developer", sent("developer")),
        (400, "context length exceeded; unknown role developer", sent("system")),  # not the role in use
        (500, "response_format is broken", sent()),  # no response_format was sent
        (  # a 500 that echoes the request: it names response_format without refusing it
            500,
            "Internal error handling {'response_format': {'type': 'json_schema'}, 'messages': []}",
            sent(response_format={"type": "json_schema"}),
        ),
    ],
)
def test_what_is_not_a_refusal(status: int, message: str, body: dict[str, Any]) -> None:
    assert refusal_of(status_error(status, {"error": {"message": message}}), body) is None


def test_a_valid_system_message_beside_a_refused_one_is_not_its_refusal() -> None:
    """llama-cpp-python lists every union member's complaint: "Input should be 'system'" for another
    message does not refuse the system role in use."""
    body = sent("system")
    body["messages"].append({"role": "tool", "content": "x"})  # no tool_call_id: refused
    assert refusal_of(llama_error(body), body) is None


def test_auto_switches_once_with_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    dialect = Dialect(instruction_role="auto", token_limit_param="auto", base_url=None)
    caplog.set_level(logging.INFO, logger="services.llm.dialect")
    assert dialect.learn(Refusal("instruction_role", "developer", 500)) is True
    assert dialect.role == "system"
    assert dialect.learn(Refusal("instruction_role", "developer", 500)) is True, "a call that sent the old one"
    assert dialect.message({"role": "developer", "content": "x"})["role"] == "system"
    assert dialect.message({"role": "user", "content": "x"})["role"] == "user"
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == 1 and "OPENAI_INSTRUCTION_ROLE=auto" in infos[0].getMessage()
    assert "system" in infos[0].getMessage()
    assert dialect.learn(Refusal("instruction_role", "system", 500)) is False, "never back and forth"
    assert dialect.learn(Refusal("instruction_role", "system", 500)) is False
    assert dialect.role == "system"
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert dialect.learn(Refusal("token_limit_param", "max_completion_tokens", 400)) is True
    assert dialect.token_limit_param == "max_tokens"


def test_a_fixed_setting_is_kept_and_named_once(caplog: pytest.LogCaptureFixture) -> None:
    dialect = Dialect(instruction_role="developer", token_limit_param="max_completion_tokens", base_url="http://h")
    for _ in range(3):
        assert dialect.learn(Refusal("instruction_role", "developer", 500)) is False
    assert dialect.role == "developer"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        "the LLM endpoint refuses OPENAI_INSTRUCTION_ROLE=developer (HTTP 500): set OPENAI_INSTRUCTION_ROLE=auto"
    ]


# --- through the client, against a stub that answers as llama-cpp-python's server --------------------


def dialect_for(url: str | None, **settings: Any) -> Dialect:
    return Dialect(
        instruction_role=settings.get("role", "auto"), token_limit_param=settings.get("limit", "auto"), base_url=url
    )


async def test_a_local_server_is_answered_with_system_and_max_tokens_at_once(stub_llm: StubOpenAI) -> None:
    stub_llm.llama_cpp = True
    llm = client_for(stub_llm.base_url, dialect=dialect_for(stub_llm.base_url), retry=RETRIES)
    assert (await llm.chat([PromptPart("developer", "be nice", 0), PromptPart("user", "hi", 0)])).text
    assert len(stub_llm.requests) == 1
    body = stub_llm.requests[0]
    assert body["messages"][0]["role"] == "system" and body["max_tokens"] == 100
    assert "max_completion_tokens" not in body


async def test_a_refused_role_is_learnt_once_not_retried_as_an_outage(
    stub_llm: StubOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """Started as for OpenAI (developer): the server's 500 naming the role switches it at once, one
    request more, one INFO line; the next calls send system straight away."""
    stub_llm.llama_cpp = True
    caplog.set_level(logging.INFO)
    llm = client_for(stub_llm.base_url, dialect=dialect_for(None, limit="max_tokens"), retry=RETRIES)
    deltas: list[str] = []

    async def shown(text: str) -> None:
        deltas.append(text)

    assert (await llm.chat(PROMPT, on_delta=shown)).text == "".join(deltas), "streamed, as drafts are"
    for _ in range(2):
        assert (await llm.chat(PROMPT)).text
    roles = [r["messages"][0]["role"] for r in stub_llm.requests]
    assert roles == ["developer", "system", "system", "system"]
    learnt = [r for r in caplog.records if "OPENAI_INSTRUCTION_ROLE=auto" in r.getMessage()]
    assert len(learnt) == 1 and learnt[0].levelno == logging.INFO
    assert not [r for r in caplog.records if "retry" in r.getMessage()], "no backoff, no outage"


async def test_a_fixed_refused_role_is_a_refusal_not_an_outage(stub_llm: StubOpenAI) -> None:
    stub_llm.llama_cpp = True
    llm = client_for(stub_llm.base_url, dialect=dialect_for(stub_llm.base_url, role="developer"), retry=RETRIES)
    with pytest.raises(FeatureRefusedError) as caught:
        await llm.chat(PROMPT)
    assert not isinstance(caught.value, LLMUnavailableError)
    assert len(stub_llm.requests) == 1, "not retried"
    assert "You are the support assistant" not in str(caught.value), "the echoed prompt is not in the error"


async def test_max_completion_tokens_is_ignored_there_so_auto_sends_max_tokens(stub_llm: StubOpenAI) -> None:
    """Why auto starts with max_tokens on other servers: max_completion_tokens is not refused, only
    ignored, so nothing could be learnt from it and MAX_OUTPUT_TOKENS would cap nothing."""
    stub_llm.llama_cpp = True
    long = "word " * 400
    stub_llm.chat_replies.extend([long, long])
    ignored = client_for(stub_llm.base_url, token_limit_param="max_completion_tokens")
    assert (await ignored.chat(PROMPT)).text == long, "uncapped"
    capped = client_for(stub_llm.base_url, dialect=dialect_for(stub_llm.base_url))
    with pytest.raises(Exception, match="output-token limit"):
        await capped.chat(PROMPT)


async def test_a_500_naming_json_schema_is_a_format_refusal_not_retried(stub_llm: StubOpenAI) -> None:
    stub_llm.llama_cpp = True
    llm = client_for(stub_llm.base_url, dialect=dialect_for(stub_llm.base_url), retry=RETRIES)
    with pytest.raises(ResponseFormatRejectedError) as caught:
        await llm.summarize(PROMPT, schema={"type": "object"}, response_format="json_schema")
    assert caught.value.status == 500 and len(stub_llm.requests) == 1


async def test_summaries_on_llama_cpp_python_settle_on_json_object(stub_llm: StubOpenAI, counter: TokenCounter) -> None:
    """The detection no longer takes the 500 for an outage: it moves to json_object in the first fold,
    the breaker never counts a failure, and later folds ask json_object straight away."""
    stub_llm.llama_cpp = True
    breaker = CircuitBreaker(failures=1, cooldown=600)
    summarizer = Summarizer(
        llm=client_for(stub_llm.base_url, dialect=dialect_for(stub_llm.base_url), retry=RETRIES),
        counter=counter,
        prompt=default_registry().get("summary"),
        max_tokens=300,
        breaker=breaker,
    )
    turns = (StoredMessage(1, "user", "My order 7718 is late", 10),)
    for _ in range(2):
        outcome = await summarizer.fold(None, turns)
        assert "7718" in " ".join(outcome.summary.key_facts)
    assert summarizer.formats.current == "json_object" and not breaker.is_open
    kinds = [r["response_format"]["type"] for r in stub_llm.summary_requests]
    assert kinds == ["json_schema", "json_object", "json_object"]
    assert {r["messages"][0]["role"] for r in stub_llm.summary_requests} == {"system"}
