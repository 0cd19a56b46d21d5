"""The model client's tool calls against the stub OpenAI server: several calls in one reply (streamed
as real deltas, or whole) read in order with their ids, tool messages sent back, ``tool_choice``
sent with the tools, and an endpoint that refuses tools asked again without them, once learnt, with
one WARNING per process."""

from __future__ import annotations

import logging

import pytest

from services.core.records import PromptPart, ToolCall
from services.llm.client import LLMClient
from tests.stubs.openai_server import StubError, StubOpenAI, tool_calls_reply

LOOKUP = {
    "type": "function",
    "function": {
        "name": "order_status",
        "description": "Status of an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
}
ASK = (PromptPart("system", "You help.", 0), PromptPart("user", "Where are 5521 and 7718?", 0))


async def noop(_text: str) -> None:
    return None


@pytest.mark.parametrize("streamed", [True, False])
async def test_several_calls_in_one_reply_are_read_in_order(
    stub_llm: StubOpenAI, llm: LLMClient, streamed: bool
) -> None:
    arguments = '{"order_id": "' + "5521" * 10 + '"}'  # streamed in many fragments
    stub_llm.chat_replies.append(tool_calls_reply(("order_status", arguments), ("order_status", {"order_id": "7718"})))
    completion = await llm.chat(ASK, tools=[LOOKUP], on_delta=noop if streamed else None)
    assert [(c.name, c.arguments) for c in completion.tool_calls] == [
        ("order_status", arguments),
        ("order_status", '{"order_id": "7718"}'),
    ]
    ids = [c.id for c in completion.tool_calls]
    assert all(ids) and len(set(ids)) == 2
    assert completion.tool_call == completion.tool_calls[0], "the first call, for the callers of one"


async def test_tool_messages_and_tool_choice_are_sent(stub_llm: StubOpenAI, llm: LLMClient) -> None:
    calls = (ToolCall("order_status", '{"order_id": "5521"}', "call_a"), ToolCall("order_status", "{}", "call_b"))
    messages = (
        *ASK,
        PromptPart("assistant", "", 0, tool_calls=calls),
        PromptPart("tool", "<tool_result>\nshipped\n</tool_result>", 0, tool_call_id="call_a"),
        PromptPart("tool", "<tool_result>\nrefused\n</tool_result>", 0, tool_call_id="call_b"),
    )
    stub_llm.chat_replies.append("5521 has shipped.")
    completion = await llm.chat(messages, tools=[LOOKUP], tool_choice="none", on_delta=noop)
    assert completion.text == "5521 has shipped."
    sent = stub_llm.chat_requests[-1]
    assert sent["tool_choice"] == "none" and sent["tools"] == [LOOKUP]
    assert sent["messages"][2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "order_status", "arguments": '{"order_id": "5521"}'},
            },
            {"id": "call_b", "type": "function", "function": {"name": "order_status", "arguments": "{}"}},
        ],
    }
    assert [m.get("tool_call_id") for m in sent["messages"][3:]] == ["call_a", "call_b"]


async def test_an_endpoint_refusing_tools_is_asked_again_without_them_with_one_warning(
    stub_llm: StubOpenAI, llm: LLMClient, caplog: pytest.LogCaptureFixture
) -> None:
    stub_llm.tools_support = "reject"
    stub_llm.chat_replies.extend(["An answer without tools.", "Another."])
    with caplog.at_level(logging.WARNING, logger="services.llm.dialect"):
        first = await llm.chat(ASK, tools=[LOOKUP], on_delta=noop)
        second = await llm.chat(ASK, tools=[LOOKUP], tool_choice="none")
    assert (first.text, second.text) == ("An answer without tools.", "Another.")
    assert ["tools" in r for r in stub_llm.chat_requests] == [True, False, False]
    assert "tool_choice" not in stub_llm.chat_requests[-1]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "refused the request's tools (HTTP 400" in warnings[0].getMessage()


CONTEXT_400 = StubError(
    400,
    type="invalid_request_error",
    code="context_length_exceeded",
    message=(
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 8500 tokens "
        "(8000 in the messages, 500 in the functions). Please reduce the length of the messages or functions."
    ),
)
ECHOED_500 = StubError(500, message="upstream failed for request {'model': 'm', 'tools': [...]}")
CONTEXT_NOT_SUPPORTED = StubError(
    400, code="context_length_exceeded", message="too long: the tools block is not supported at this length"
)


@pytest.mark.parametrize(
    "error", [CONTEXT_400, ECHOED_500, CONTEXT_NOT_SUPPORTED], ids=["context_length_400", "echoing_500", "by_code"]
)
async def test_an_unrelated_error_naming_functions_does_not_switch_tools_off(
    stub_llm: StubOpenAI, llm: LLMClient, error: StubError
) -> None:
    stub_llm.chat_replies.extend([error, "hello"])
    with pytest.raises(Exception):  # noqa: B017 - the request fails; what matters is what the process learnt
        await llm.chat(ASK, tools=[LOOKUP])
    assert llm.dialect.tools, "one error switched actions and the handoff tool off for every chat of the process"
    assert ["tools" in r for r in stub_llm.chat_requests] == [True]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (500, "tools param requires --jinja flag"),  # llama.cpp
        (400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'),  # vLLM
        (400, "registry.ollama.ai/library/gemma:2b does not support tools"),  # Ollama
        (422, "tool_choice: extra_forbidden"),
    ],
)
async def test_a_real_refusal_of_tools_still_switches_them_off(
    stub_llm: StubOpenAI, llm: LLMClient, status: int, message: str
) -> None:
    stub_llm.chat_replies.extend([StubError(status, message=message), "An answer without tools."])
    completion = await llm.chat(ASK, tools=[LOOKUP])
    assert completion.text == "An answer without tools." and not llm.dialect.tools


async def test_a_model_ignoring_tools_just_answers(stub_llm: StubOpenAI, llm: LLMClient) -> None:
    stub_llm.tools_support = "ignore"
    stub_llm.chat_replies.append("I cannot look orders up, but here is what I know.")
    completion = await llm.chat(ASK, tools=[LOOKUP])
    assert completion.tool_calls == () and completion.text.startswith("I cannot look orders up")
