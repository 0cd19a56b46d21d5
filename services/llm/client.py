"""The language-model client: chat replies (plain or streamed) and structured summary calls.

Built on ``openai.AsyncOpenAI`` (its own retries off) so any OpenAI-compatible endpoint works. Every
failure is classified here into the engine's LLMError family (services.llm.errors), only an
answer with a finish reason counts (services.llm.reply), and one policy retries a call
(services.core.retry.RetryPolicy) behind a process-wide gate that keeps the provider's Retry-After.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import openai
from openai import AsyncOpenAI, AsyncStream

from services.core.errors import (
    LLMBadReplyError,
    LLMConfigurationError,
    LLMError,
    LLMReplyTruncatedError,
    LLMUnavailableError,
    ResponseFormatRejectedError,
)
from services.core.records import Completion, OnDelta, PromptPart
from services.core.retry import REQUEST_BUDGET, RetryPolicy
from services.core.summary_state import SummaryFormat
from services.llm.dialect import Dialect, FeatureRefusedError, Refusal, refusal_of
from services.llm.errors import READ_FAILURES, incomplete_reply, translate_openai_error
from services.llm.reply import Reply, StreamReader, read_completion

__all__ = ["LLMClient", "NotBefore", "translate_openai_error"]

log = logging.getLogger(__name__)

CHAT_COMPLETIONS = "/chat/completions"
TokenLimitParam = Literal["max_completion_tokens", "max_tokens"]
Call = Literal["chat", "summary"]
PROBE = (PromptPart("user", "ping", 0),)


class NotBefore:
    """The moment before which no call of this process asks the provider again: the latest
    Retry-After it gave (a 429 for one chat is a 429 for all of them)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = 0.0

    def push(self, seconds: float) -> None:
        self._until = max(self._until, self._clock() + seconds)

    def remaining(self) -> float:
        return max(0.0, self._until - self._clock())


@dataclass
class _Progress:
    shown: bool = False
    """Text of this attempt was passed on (a draft): asking again would show a second text."""


class LLMClient:
    """Chat and summary calls. A failed call (429, 5xx, timeouts, an incomplete answer) is asked again
    by ``retry`` (none by default); give the AsyncOpenAI client ``max_retries=0`` so that its own
    retries do not multiply these. ``gate``: shared by every call of the process."""

    def __init__(
        self,
        *,
        client: AsyncOpenAI,
        chat_model: str,
        summary_model: str,
        max_output_tokens: int,
        summary_max_tokens: int,
        token_limit_param: TokenLimitParam = "max_completion_tokens",
        dialect: Dialect | None = None,
        summary_response_format: Literal["json_schema", "json_object"] = "json_schema",
        temperature: float | None = None,
        max_concurrency: int = 64,
        retry: RetryPolicy | None = None,
        gate: NotBefore | None = None,
        rand: Callable[[], float] = random.random,
        cache_key_secret: bytes | None = None,
        on_in_flight: Callable[[int], None] | None = None,
        on_accepted: Callable[[Call], None] | None = None,
    ) -> None:
        self._client = client
        self._cache_key_secret = cache_key_secret
        self._retry = retry or RetryPolicy()
        self._gate = gate or NotBefore()
        self._rand = rand
        self.chat_model = chat_model
        self.summary_model = summary_model
        self._max_output_tokens = max_output_tokens
        self._summary_max_tokens = summary_max_tokens
        self.dialect = dialect or Dialect(token_limit_param=token_limit_param)
        """The instruction role and reply-cap parameter sent (learnt from the endpoint's refusals)."""
        self._summary_response_format = summary_response_format
        self._temperature = temperature
        self._slots = asyncio.Semaphore(max_concurrency)
        self.in_flight = 0
        self.on_in_flight: Callable[[int], None] = on_in_flight or (lambda _count: None)
        """Told the number of calls running after each change (the bot sets a gauge with it)."""
        self.on_accepted: Callable[[Call], None] = on_accepted or (lambda _call: None)
        """Told after each request the provider accepted (HTTP 2xx): its key, model and quota work, so
        the bot clears a refusal of that call kind with it."""

    async def _post(
        self, call: Call, model: str, messages: Sequence[PromptPart], extra: dict[str, Any], limit: int, stream: bool
    ) -> Any:
        """POST /chat/completions through the official client's generic ``post`` (its documented way to
        call an endpoint with a body we build ourselves): auth, retries with backoff, timeouts, error
        classes and SSE decoding stay the client's. Unlike the typed ``chat.completions.create`` it
        neither re-walks the request through its TypedDict transform nor builds pydantic models of
        the reply and of every stream chunk (``cast_to=object`` hands back the decoded JSON), which cost
        a worker a large share of its CPU per turn (``benchmarks/load.py --profile``). The instruction
        role and the name of the reply cap (``limit``) are the dialect's; an error whose body names one
        of them, or the response format, as refused is raised as that refusal, not as an outage."""
        sent = [self.dialect.message(m.as_openai()) for m in messages]
        if not self.dialect.tools:  # refused once: the same request without them
            extra = {key: value for key, value in extra.items() if key not in ("tools", "tool_choice")}
        body: dict[str, Any] = {"model": model, "messages": sent, **extra, self.dialect.token_limit_param: limit}
        try:
            if not stream:
                answer = await self._client.post(CHAT_COMPLETIONS, body=body, cast_to=object)
            else:
                body |= {"stream": True, "stream_options": {"include_usage": True}}
                answer = await self._client.post(
                    CHAT_COMPLETIONS, body=body, cast_to=object, stream=True, stream_cls=AsyncStream[object]
                )
        except openai.APIStatusError as exc:
            refusal = refusal_of(exc, body)
            if refusal is None:
                raise
            raise _refused(refusal) from exc
        self.on_accepted(call)
        return answer

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

    async def probe(self, call: Call) -> None:
        """One request of ``call``'s model asking for a single token, its answer unread: returns when
        the provider accepts it (``on_accepted`` is told), raises its LLMError otherwise (a refusal is
        LLMConfigurationError). Not retried; while the provider asked to wait it is not asked."""
        if (wait := self._gate.remaining()) > 0:
            raise LLMUnavailableError(f"the LLM provider asked to wait {wait:.1f} s", retry_after=wait)
        model = self.chat_model if call == "chat" else self.summary_model
        async with self._slot():
            try:
                await self._post(call, model, PROBE, {}, 1, stream=False)
            except FeatureRefusedError as exc:
                self.dialect.learn(exc.refusal)  # the next probe sends what the endpoint takes
                raise
            except Exception as exc:
                _raise_classified(exc, mid_answer=False)

    async def chat(
        self,
        messages: Sequence[PromptPart],
        *,
        on_delta: OnDelta | None = None,
        tools: Sequence[dict[str, Any]] = (),
        chat_id: int | None = None,
        tool_choice: str | None = None,
    ) -> Completion:
        """A support reply. With ``on_delta`` the reply is streamed and each text delta is passed on.
        With ``tools`` the model may answer with calls of them (``Completion.tool_calls``);
        ``tool_choice`` ("none": answer in text) is sent with them. An endpoint that refuses tools is
        asked again without them (once learnt, never sent again: ``Dialect.tools``). ``chat_id``: the
        chat's prompt_cache_key is sent when this client has a cache-key secret."""
        extra: dict[str, Any] = {}
        if chat_id is not None and self._cache_key_secret is not None:
            extra["prompt_cache_key"] = self.prompt_cache_key(chat_id)
        if self._temperature is not None:
            extra["temperature"] = self._temperature
        if tools:
            extra["tools"] = list(tools)
            if tool_choice is not None:
                extra["tool_choice"] = tool_choice
        limit = self._max_output_tokens
        if on_delta is None:
            return await self._with_retries(
                lambda _progress: self._complete("chat", self.chat_model, messages, extra, limit), capped=True
            )
        stream = on_delta
        return await self._with_retries(
            lambda progress: self._stream(self.chat_model, messages, extra, limit, stream, progress), capped=True
        )

    async def describe(self, messages: Sequence[PromptPart], *, max_tokens: int) -> Completion:
        """A short plain completion of the chat model (the note an image is remembered by)."""
        return await self._with_retries(
            lambda _progress: self._complete("chat", self.chat_model, messages, {}, max_tokens)
        )

    def prompt_cache_key(self, chat_id: int) -> str:
        """The chat's key for the provider's cache routing: stable across workers and restarts, and a
        keyed hash, so the provider can tell chats apart but not which Telegram chat each one is."""
        digest = hmac.new(self._cache_key_secret or b"", str(chat_id).encode(), hashlib.sha256).hexdigest()
        return f"chat-{digest[:32]}"

    async def summarize(
        self, messages: Sequence[PromptPart], *, schema: dict[str, Any], response_format: SummaryFormat | None = None
    ) -> Completion:
        """A summary call; the text is the model's answer (not yet validated). ``response_format``:
        json_schema (strict structured output), json_object, or plain (none sent: the instruction asks
        for JSON); default: the client's. An error (4xx or 5xx) naming response_format is
        ResponseFormatRejectedError, never retried."""
        kind = response_format or self._summary_response_format
        extra: dict[str, Any] = {}
        if kind == "json_schema":
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "conversation_summary", "strict": True, "schema": schema},
            }
        elif kind == "json_object":
            extra["response_format"] = {"type": "json_object"}
        limit = self._summary_max_tokens * 2
        return await self._with_retries(
            lambda _progress: self._complete("summary", self.summary_model, messages, extra, limit)
        )

    async def _with_retries(
        self, attempt: Callable[[_Progress], Awaitable[Completion]], *, capped: bool = False
    ) -> Completion:
        """Run ``attempt`` until it answers or the policy gives up (or, ``capped``, the question's
        REQUEST_BUDGET is spent); every request is counted on that budget. The error raised says how
        many requests the call made and, when a wait was too long to sleep here, how long to wait."""
        policy, started, budget = self._retry, time.monotonic(), REQUEST_BUDGET.get()
        for number in itertools.count():
            await self._wait_for_gate(started, requests=number)
            progress = _Progress()
            if budget is not None:
                budget.made += 1
            try:
                async with self._slot():
                    return await attempt(progress)
            except LLMError as exc:
                exc.requests = number + 1
                if isinstance(exc, FeatureRefusedError) and self.dialect.learn(exc.refusal):
                    continue  # the role or parameter it refused is no longer sent: ask again at once
                if not isinstance(exc, LLMUnavailableError) or isinstance(exc, LLMConfigurationError):
                    raise
                if exc.retry_after:
                    self._gate.push(exc.retry_after)
                spent = capped and budget is not None and budget.made >= budget.cap
                if progress.shown or number >= policy.max_retries or spent:
                    raise
                wait = policy.wait(number, retry_after=exc.retry_after, rand=self._rand)
                if not policy.sleeps(wait, elapsed=time.monotonic() - started):
                    exc.retry_after = wait
                    raise
                log.info("LLM request failed (%s); retry %d of %d in %.2f s", exc, number + 1, policy.max_retries, wait)
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _wait_for_gate(self, started: float, *, requests: int) -> None:
        """Sleep out the provider's Retry-After (given to any call of this process), or raise when it
        is too long to wait in the call."""
        while (remaining := self._gate.remaining()) > 0:
            if not self._retry.sleeps(remaining, elapsed=time.monotonic() - started):
                raise LLMUnavailableError(
                    f"the LLM provider asked to wait {remaining:.1f} s", retry_after=remaining, requests=requests
                )
            await asyncio.sleep(remaining)

    async def _complete(
        self, call: Call, model: str, messages: Sequence[PromptPart], extra: dict[str, Any], limit: int
    ) -> Completion:
        started = time.perf_counter()
        try:
            body = await self._post(call, model, messages, extra, limit, stream=False)
        except Exception as exc:
            _raise_classified(exc, mid_answer=False)
        return self._checked(read_completion(body), model, started)

    async def _stream(
        self,
        model: str,
        messages: Sequence[PromptPart],
        extra: dict[str, Any],
        limit: int,
        on_delta: OnDelta,
        progress: _Progress,
    ) -> Completion:
        started = time.perf_counter()
        reader = StreamReader()
        try:
            stream = await self._post("chat", model, messages, extra, limit, stream=True)
        except Exception as exc:
            _raise_classified(exc, mid_answer=False)
        try:
            chunks = aiter(stream)
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    _raise_classified(exc, mid_answer=True)
                if text := reader.feed(chunk):
                    progress.shown = True
                    await on_delta(text)
        finally:
            with contextlib.suppress(*READ_FAILURES, openai.OpenAIError):
                await stream.close()
        return self._checked(reader.reply(), model, started)

    @staticmethod
    def _checked(reply: Reply, model: str, started: float) -> Completion:
        if reply.finish_reason == "length":
            raise LLMReplyTruncatedError("the reply hit the output-token limit")
        if reply.finish_reason == "content_filter":
            raise LLMBadReplyError("the reply was blocked by the provider's content filter")
        if not reply.text.strip() and not reply.tool_calls:
            raise LLMBadReplyError("the model returned an empty reply")
        elapsed = time.perf_counter() - started
        return Completion(reply.text, reply.finish_reason, reply.usage, model, elapsed, tool_calls=reply.tool_calls)


def _refused(refusal: Refusal) -> LLMError:
    if refusal.feature == "response_format":
        what = f"the LLM endpoint refused response_format {refusal.value} (HTTP {refusal.status})"
        return ResponseFormatRejectedError(what, status=refusal.status)
    return FeatureRefusedError(refusal)


def _raise_classified(exc: Exception, *, mid_answer: bool) -> NoReturn:
    """Raise the engine's error for a provider failure, or ``exc`` itself when it is not one (a bug)."""
    error = incomplete_reply(exc, mid_answer=mid_answer)
    if error is None:
        raise exc
    raise error from exc
