"""The language-model client: chat replies (plain or streamed) and structured summary calls.

Built on ``openai.AsyncOpenAI`` so any OpenAI-compatible endpoint works. openai's errors are
translated here into the engine's LLMError family.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

import openai
from openai import AsyncOpenAI, AsyncStream

from services.engine.models import Completion, OnDelta, PromptPart, ToolCall, Usage
from services.engine.retry import retry_after_of
from services.engine.summary_format import ResponseFormatRejectedError, SummaryFormat, rejects_response_format
from services.errors import (
    LLMBadReplyError,
    LLMConfigurationError,
    LLMError,
    LLMIncompleteReplyError,
    LLMReplyTruncatedError,
    LLMRequestRejectedError,
    LLMUnavailableError,
)

log = logging.getLogger(__name__)

CHAT_COMPLETIONS = "/chat/completions"
TokenLimitParam = Literal["max_completion_tokens", "max_tokens"]


_CONFIGURATION_STATUSES = frozenset({401, 402, 403, 404})
_REJECTED_STATUSES = frozenset({400, 409, 413, 422})


def translate_openai_error(exc: openai.OpenAIError) -> LLMError:
    """Map an openai exception to the engine's error kinds (the provider's Retry-After kept)."""
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        what = f"LLM provider answered HTTP {status} ({type(exc).__name__}{_code_of(exc)})"
        if status in _CONFIGURATION_STATUSES or (status == 429 and exc.code == "insufficient_quota"):
            return LLMConfigurationError(what, status=status)
        if status == 429 or status >= 500 or status == 408:
            return LLMUnavailableError(what, status=status, retry_after=retry_after_of(exc.response.headers))
        if status in _REJECTED_STATUSES:
            return LLMRequestRejectedError(what, status=status)
        return LLMBadReplyError(what, status=status)
    if isinstance(exc, openai.APIConnectionError):  # timeouts included
        return LLMUnavailableError(f"LLM provider unreachable: {type(exc).__name__}")
    if isinstance(exc, openai.APIResponseValidationError):
        return LLMIncompleteReplyError(f"LLM provider sent an unreadable answer: {type(exc).__name__}")
    return LLMUnavailableError(f"LLM call failed: {type(exc).__name__}")


def _code_of(exc: openai.APIStatusError) -> str:
    return f", code {exc.code}" if isinstance(exc.code, str) and exc.code else ""


class LLMClient:
    """Chat and summary calls. Transport retries (429/5xx/timeouts, with backoff and jitter) are done
    by the injected AsyncOpenAI client (its ``max_retries``)."""

    def __init__(
        self,
        *,
        client: AsyncOpenAI,
        chat_model: str,
        summary_model: str,
        max_output_tokens: int,
        summary_max_tokens: int,
        token_limit_param: TokenLimitParam = "max_completion_tokens",
        summary_response_format: Literal["json_schema", "json_object"] = "json_schema",
        temperature: float | None = None,
        max_concurrency: int = 64,
    ) -> None:
        self._client = client
        self.chat_model = chat_model
        self.summary_model = summary_model
        self._max_output_tokens = max_output_tokens
        self._summary_max_tokens = summary_max_tokens
        self._token_limit_param = token_limit_param
        self._summary_response_format = summary_response_format
        self._temperature = temperature
        self._slots = asyncio.Semaphore(max_concurrency)
        self.in_flight = 0
        self.on_in_flight: Callable[[int], None] = lambda _count: None
        """Told the number of calls running after each change (the bot sets a gauge with it)."""

    async def _post(self, model: str, messages: Sequence[PromptPart], extra: dict[str, Any], stream: bool) -> Any:
        """POST /chat/completions through the official client's generic ``post`` (its documented way to
        call an endpoint with a body we build ourselves): auth, retries with backoff, timeouts, error
        classes and SSE decoding stay the client's. Unlike the typed ``chat.completions.create`` it
        neither re-walks the request through its TypedDict transform nor builds pydantic models of
        the reply and of every stream chunk (``cast_to=object`` hands back the decoded JSON), which cost
        a worker a large share of its CPU per turn (``benchmarks/load.py --profile``)."""
        body: dict[str, Any] = {"model": model, "messages": [m.as_openai() for m in messages], **extra}
        if not stream:
            return await self._client.post(CHAT_COMPLETIONS, body=body, cast_to=object)
        body |= {"stream": True, "stream_options": {"include_usage": True}}
        return await self._client.post(
            CHAT_COMPLETIONS, body=body, cast_to=object, stream=True, stream_cls=AsyncStream[object]
        )

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """Per-process cap on concurrent LLM calls (a streamed call holds its slot until the end)."""
        async with self._slots:
            self.in_flight += 1
            self.on_in_flight(self.in_flight)
            try:
                yield
            finally:
                self.in_flight -= 1
                self.on_in_flight(self.in_flight)

    async def close(self) -> None:
        await self._client.close()

    async def chat(
        self,
        messages: Sequence[PromptPart],
        *,
        on_delta: OnDelta | None = None,
        tools: Sequence[dict[str, Any]] = (),
    ) -> Completion:
        """A support reply. With ``on_delta`` the reply is streamed and each text delta is passed on.
        With ``tools`` the model may answer with a call of one of them (``Completion.tool_call``)."""
        extra: dict[str, Any] = {self._token_limit_param: self._max_output_tokens}
        if self._temperature is not None:
            extra["temperature"] = self._temperature
        if tools:
            extra["tools"] = list(tools)
        async with self._slot():
            if on_delta is None:
                return await self._complete(self.chat_model, messages, extra)
            return await self._stream(self.chat_model, messages, extra, on_delta)

    async def summarize(
        self, messages: Sequence[PromptPart], *, schema: dict[str, Any], response_format: SummaryFormat | None = None
    ) -> Completion:
        """A summary call; the text is the model's answer (not yet validated). ``response_format``:
        json_schema (strict structured output), json_object, or plain (none sent: the instruction asks
        for JSON); default: the client's. A 400 naming response_format is ResponseFormatRejectedError."""
        kind = response_format or self._summary_response_format
        extra: dict[str, Any] = {self._token_limit_param: self._summary_max_tokens * 2}
        if kind == "json_schema":
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "conversation_summary", "strict": True, "schema": schema},
            }
        elif kind == "json_object":
            extra["response_format"] = {"type": "json_object"}
        async with self._slot():
            try:
                return await self._complete(self.summary_model, messages, extra)
            except LLMRequestRejectedError as exc:
                if kind != "plain" and rejects_response_format(exc):
                    raise ResponseFormatRejectedError(str(exc), status=exc.status, requests=exc.requests) from exc
                raise

    async def _complete(self, model: str, messages: Sequence[PromptPart], extra: dict[str, Any]) -> Completion:
        started = time.perf_counter()
        try:
            response = await self._post(model, messages, extra, stream=False)
        except openai.OpenAIError as exc:
            raise translate_openai_error(exc) from exc
        choice = _first_choice(response)
        if choice is None:
            raise LLMBadReplyError("LLM answered with no choices")
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        usage = Usage.from_json(response.get("usage"))
        call = _tool_call(message.get("tool_calls") if isinstance(message, dict) else None)
        return self._checked(text if isinstance(text, str) else "", _finish(choice), usage, model, started, call)

    async def _stream(
        self, model: str, messages: Sequence[PromptPart], extra: dict[str, Any], on_delta: OnDelta
    ) -> Completion:
        started = time.perf_counter()
        parts: list[str] = []
        finish_reason = ""
        usage: Usage | None = None
        tool_name, tool_arguments = "", []
        try:
            stream = await self._post(model, messages, extra, stream=True)
            async for chunk in stream:
                choice = _first_choice(chunk)
                if isinstance(chunk, dict) and chunk.get("usage") is not None:
                    usage = Usage.from_json(chunk["usage"])
                if choice is None:
                    continue
                finish_reason = _finish(choice) or finish_reason
                delta = choice.get("delta")
                text = delta.get("content") if isinstance(delta, dict) else None
                if text and isinstance(text, str):
                    parts.append(text)
                    await on_delta(text)
                for call in (delta.get("tool_calls") if isinstance(delta, dict) else None) or []:
                    # the first call only (index 0): its name comes once, its arguments in pieces
                    function = call.get("function") if isinstance(call, dict) else None
                    if not isinstance(function, dict) or call.get("index", 0) != 0:
                        continue
                    tool_name = tool_name or str(function.get("name") or "")
                    tool_arguments.append(str(function.get("arguments") or ""))
        except openai.OpenAIError as exc:
            raise translate_openai_error(exc) from exc
        call = ToolCall(tool_name, "".join(tool_arguments)) if tool_name else None
        return self._checked("".join(parts), finish_reason, usage, model, started, call)

    @staticmethod
    def _checked(
        text: str, finish_reason: str, usage: Usage | None, model: str, started: float, call: ToolCall | None = None
    ) -> Completion:
        if finish_reason == "length":
            raise LLMReplyTruncatedError("the reply hit the output-token limit")
        if finish_reason == "content_filter":
            raise LLMBadReplyError("the reply was blocked by the provider's content filter")
        if not text.strip() and call is None:
            raise LLMBadReplyError("the model returned an empty reply")
        return Completion(text, finish_reason, usage, model, time.perf_counter() - started, call)


def _tool_call(calls: object) -> ToolCall | None:
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
        return None
    function = calls[0].get("function")
    if not isinstance(function, dict) or not function.get("name"):
        return None
    return ToolCall(str(function["name"]), str(function.get("arguments") or ""))


def _first_choice(data: object) -> dict[str, Any] | None:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return choices[0]


def _finish(choice: dict[str, Any]) -> str:
    reason = choice.get("finish_reason")
    return reason if isinstance(reason, str) else ""
