"""A small OpenAI-compatible server on loopback: /v1/chat/completions, plain and streamed (SSE).

Replies come from queues (``chat_replies``, ``summary_replies``) or, when a queue is empty, from the
reply functions. Every request body is recorded. Summary calls are told apart from chat calls by
their ``response_format``.

Usage is reported like OpenAI's: ``prompt_tokens`` counted with o200k_base the way the chat API bills
messages, and ``prompt_tokens_details.cached_tokens``: the longest prefix of this prompt seen in an
earlier request to the same model, in OpenAI's granularity (0, or 1024 + k·128 tokens; see
``tests.stubs.prompt_cache``). ``usage_details=False`` leaves the details out, as some
OpenAI-compatible servers do.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.stubs.prompt_cache import PrefixCache, PromptTokens

Reply = str | int  # an int is an HTTP error status to answer with
TOOL_PREFIX = "<<tool:"
"""A reply ``<<tool:NAME>>ARGUMENTS`` is answered as a call of the tool NAME (finish_reason
``tool_calls``), plain or streamed as OpenAI does: the name in the first chunk, the arguments in pieces."""


def tool_reply(name: str, **arguments: Any) -> str:
    return f"{TOOL_PREFIX}{name}>>{json.dumps(arguments, ensure_ascii=False)}"


ReplyFn = Callable[[dict[str, Any]], str]

_TAG = re.compile(r"<customer_message>\n(.*?)\n</customer_message>", re.S)


def customer_texts(body: dict[str, Any]) -> list[str]:
    """The customer's texts in a request, oldest first (summary-call turns included)."""
    texts: list[str] = []
    for message in body["messages"]:
        texts.extend(_TAG.findall(message.get("content") or ""))
    return texts


def echo_reply(body: dict[str, Any]) -> str:
    texts = customer_texts(body)
    return f"Support answer to: {texts[-1][:60] if texts else '?'}"


def previous_summary(body: dict[str, Any]) -> dict[str, Any]:
    content = body["messages"][-1]["content"]
    match = re.search(r"<previous_summary>\n(.*?)\n</previous_summary>", content, re.S)
    return json.loads(match.group(1)) if match else {}


def faithful_summary(body: dict[str, Any]) -> str:
    """Keeps every customer sentence (shortened) as a key fact; asked to compress (no new turns), it
    keeps the newer half of the previous facts."""
    texts = customer_texts(body)
    if texts:
        facts = [text[:100] for text in texts]
    else:
        old = previous_summary(body).get("key_facts", [])
        facts = old[len(old) // 2 :]
    return json.dumps(
        {
            "topic": "customer support conversation",
            "key_facts": facts,
            "actions_taken": ["support answered the customer"],
            "decisions": [],
            "pending_questions": [],
            "next_step": "continue helping the customer",
        },
        ensure_ascii=False,
    )


def digit_dropping_summary(body: dict[str, Any]) -> str:
    """An adversarial summarizer: a plausible summary with every digit removed."""
    return re.sub(r"\d", "", faithful_summary(body))


@dataclass
class StubOpenAI:
    chat_reply: ReplyFn = echo_reply
    summary_reply: ReplyFn = faithful_summary
    latency: float = 0.0
    delays: deque[float] = field(default_factory=deque)
    """Extra latency of the next requests, one value per request (then ``latency`` again)."""
    stream_chunk_chars: int = 40
    chat_replies: deque[Reply] = field(default_factory=deque)
    summary_replies: deque[Reply] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    down: bool = False
    usage_details: bool = True
    cached_tokens: list[int] = field(default_factory=list)
    """``cached_tokens`` reported for each request, in the order of ``requests``."""
    _tokens: PromptTokens = field(default_factory=PromptTokens)
    _cache: PrefixCache = field(default_factory=PrefixCache)
    api_key: str | None = None
    """When set, requests with another bearer token get 401 (as a provider rejects a wrong key)."""
    model_list_requests: int = 0
    on_handled: Callable[[dict[str, Any], float], None] | None = None
    """Called with each completion request's body and the seconds the stub spent on it, from its
    arrival to the end of its response (the model's share of a turn, for the load benchmark)."""
    _runner: web.AppRunner | None = None
    base_url: str = ""
    # --- provider outages (issue 26: promises kept, operator-visible outages) ---
    fail_with: int | None = None
    """When set, every completion is answered with this HTTP status (a persistent outage: 429, 503...)."""
    error_headers: dict[str, str] = field(default_factory=dict)
    """Headers sent with every error answer, e.g. ``{"retry-after": "2"}`` as providers send with 429/503."""

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if "response_format" not in r]

    @property
    def summary_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if "response_format" in r]

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sockets = site._server.sockets  # type: ignore[union-attr]
        self.base_url = f"http://{host}:{sockets[0].getsockname()[1]}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _rejected(self, request: web.Request) -> web.Response | None:
        if self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        error = {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}
        return web.json_response({"error": error}, status=401)

    async def _models(self, request: web.Request) -> web.Response:
        self.model_list_requests += 1
        models = [{"id": name, "object": "model", "created": 0, "owned_by": "stub"} for name in ("stub-chat",)]
        rejected = self._rejected(request)
        return rejected if rejected is not None else web.json_response({"object": "list", "data": models})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        rejected = self._rejected(request)
        if rejected is not None:
            return rejected
        body = await request.json()
        self.requests.append(body)
        response = await self._answer(request, body)
        if self.on_handled is not None:
            self.on_handled(body, time.monotonic() - started)
        return response

    async def _answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        prompt = self._tokens.prompt((m["role"], m.get("content") or "") for m in body["messages"])
        cached = self._cache.lookup_and_store(str(body.get("model")), prompt)
        self.cached_tokens.append(cached)
        delay = self.delays.popleft() if self.delays else self.latency
        if delay:
            await asyncio.sleep(delay)
        if self.down:
            return web.json_response({"error": {"message": "down", "type": "server_error"}}, status=503)
        is_summary = "response_format" in body
        queue = self.summary_replies if is_summary else self.chat_replies
        reply: Reply = queue.popleft() if queue else (self.summary_reply if is_summary else self.chat_reply)(body)
        if self.fail_with is not None:
            reply = self.fail_with
        if isinstance(reply, int):
            return self._error_answer(reply)
        finish = "stop"
        tool: tuple[str, str] | None = None
        if reply.startswith("<<length>>"):
            reply, finish = reply.removeprefix("<<length>>"), "length"
        elif reply.startswith(TOOL_PREFIX):
            name, arguments = reply.removeprefix(TOOL_PREFIX).split(">>", 1)
            tool, reply, finish = (name, arguments), "", "tool_calls"
        prompt_tokens, completion_tokens = self._tokens.billed(prompt), max(1, len(reply) // 4)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if self.usage_details:
            usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
        if body.get("stream"):
            return await self._stream(request, body, reply, finish, usage, tool)
        message: dict[str, Any] = {"role": "assistant", "content": reply or None}
        if tool is not None:
            message["tool_calls"] = [
                {"id": "call_stub", "type": "function", "function": {"name": tool[0], "arguments": tool[1]}}
            ]
        return web.json_response(
            {
                "id": "chatcmpl-stub",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )

    def _error_answer(self, status: int) -> web.Response:
        """An error as OpenAI shapes it: ``{"error": {message, type, param, code}}`` (429 as a rate limit)."""
        if status == 429:
            error = {"message": "Rate limit reached for requests", "type": "requests", "param": None,
                     "code": "rate_limit_exceeded"}  # fmt: skip
        else:
            error = {"message": "stub error", "type": "server_error", "param": None, "code": None}
        return web.json_response({"error": error}, status=status, headers=self.error_headers)

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        reply: str,
        finish: str,
        usage: dict[str, Any],
        tool: tuple[str, str] | None = None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(payload: dict[str, Any]) -> None:
            await response.write(f"data: {json.dumps(payload)}\n\n".encode())

        base = {
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
        }
        size = self.stream_chunk_chars
        for start in range(0, len(reply), size):
            delta = {"content": reply[start : start + size]}
            await send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        if tool is not None:
            name, arguments = tool
            head = {"index": 0, "id": "call_stub", "type": "function", "function": {"name": name, "arguments": ""}}
            await send({**base, "choices": [{"index": 0, "delta": {"tool_calls": [head]}, "finish_reason": None}]})
            for start in range(0, len(arguments), 8):
                piece = {"index": 0, "function": {"arguments": arguments[start : start + 8]}}
                await send({**base, "choices": [{"index": 0, "delta": {"tool_calls": [piece]}, "finish_reason": None}]})
        await send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            await send({**base, "choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
