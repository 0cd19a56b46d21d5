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
import hashlib
import json
import re
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from services.media.image_tokens import parse_rule
from tests.stubs import llama_cpp
from tests.stubs.embeddings import StubEmbeddings
from tests.stubs.prompt_cache import Content, PrefixCache, PromptTokens
from tests.stubs.transcriptions import StubTranscriptions
from tests.stubs.vision import ImageInput, image_refusal, images_in, text_of

# --- provider faults (issue 26): HTTP errors with headers, replies broken on the wire -----------------


@dataclass(frozen=True)
class StubError:
    """An HTTP error reply as the OpenAI API sends one: the status, its headers (``retry-after``,
    ``retry-after-ms``) and the body (None: ``{"error": {...}}`` with ``message``/``type``/``code``)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | str | None = None
    code: str | None = None
    type: str = "server_error"
    message: str | None = None

    def payload(self) -> dict[str, Any] | str:
        if self.body is not None:
            return self.body
        message = self.message or f"stub error {self.status}"
        return {"error": {"message": message, "type": self.type, "param": None, "code": self.code}}


def rate_limited(*, retry_after: str | None = None, retry_after_ms: str | None = None) -> StubError:
    """429 ``rate_limit_exceeded`` (OpenAI's shape), with ``retry-after`` / ``retry-after-ms`` when given."""
    headers = {"x-ratelimit-limit-requests": "3", "x-ratelimit-remaining-requests": "0"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    if retry_after_ms is not None:
        headers["retry-after-ms"] = retry_after_ms
    return StubError(429, headers, code="rate_limit_exceeded", type="requests")


def insufficient_quota() -> StubError:
    """429 ``insufficient_quota`` as OpenAI sends it when the account's credit or quota is used up: a
    refusal until billing is fixed, with no retry-after (unlike ``rate_limited``)."""
    message = (
        "You exceeded your current quota, please check your plan and billing details. For more information on "
        "this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."
    )
    return StubError(429, code="insufficient_quota", type="insufficient_quota", message=message)


INVALID_API_KEY = StubError(401, code="invalid_api_key", type="invalid_request_error")
MODEL_NOT_FOUND = StubError(404, code="model_not_found", type="invalid_request_error")
SERVER_ERROR = StubError(500)

Fault = Literal["no_finish", "cut", "malformed", "bad_utf8"]


@dataclass(frozen=True)
class StubBroken:
    """A reply that goes wrong on the wire after ``text``. Streamed: ``no_finish`` ends cleanly with
    ``[DONE]`` but no chunk carries a finish_reason; ``cut`` closes the connection before ``[DONE]``;
    ``malformed`` sends a chunk that is not JSON; ``bad_utf8`` a chunk whose bytes are not UTF-8.
    Not streamed: ``no_finish`` answers ``finish_reason: null``, ``cut`` closes the connection with the
    body half sent, ``malformed`` and ``bad_utf8`` send a JSON content type over a body that is not JSON."""

    text: str
    fault: Fault


# ------------------------------------------------------------------------------------------------------

Reply = str | int | StubError | StubBroken  # an int is an HTTP error status to answer with
TOOL_PREFIX = "<<tool:"
FINISH_PREFIX = "<<finish:"
"""A reply ``<<finish:REASON>>TEXT`` is answered with TEXT and that finish_reason (``error``, ``abort``:
what some OpenAI-compatible servers send when generation failed part-way)."""
"""A reply ``<<tool:NAME>>ARGUMENTS`` is answered as a call of the tool NAME (finish_reason
``tool_calls``), plain or streamed as OpenAI does: the name in the first chunk, the arguments in pieces."""


TOOLS_PREFIX = "<<tools>>"
"""A reply ``<<tools>>[[NAME, ARGUMENTS], ...]`` is answered as several tool calls in one reply, in
that order (streamed as OpenAI does: each call's first chunk with its index, id and name, then its
argument fragments; ``finish_reason`` ``tool_calls``)."""


def tool_reply(name: str, **arguments: Any) -> str:
    return f"{TOOL_PREFIX}{name}>>{json.dumps(arguments, ensure_ascii=False)}"


def tool_calls_reply(*calls: tuple[str, dict[str, Any] | str]) -> str:
    """Several calls in one reply (arguments as a dict, or as the raw text the model wrote)."""
    raw = [[name, args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)] for name, args in calls]
    return TOOLS_PREFIX + json.dumps(raw, ensure_ascii=False)


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tool`` messages of a request (the results the bot sent back), in order."""
    return [m for m in body["messages"] if m.get("role") == "tool"]


def tool_protocol_error(body: dict[str, Any]) -> str | None:
    """What OpenAI answers 400 for in a request's tool messages: a ``tool`` message that answers no
    call of the assistant message before it, or a call left without its ``tool`` message."""
    expected: list[str] = []
    for message in body["messages"]:
        if message.get("role") == "tool":
            if not expected or message.get("tool_call_id") != expected[0]:
                return "messages with role 'tool' must be a response to a preceding message with 'tool_calls'"
            expected.pop(0)
            continue
        if expected:
            return "an assistant message with 'tool_calls' must be followed by tool messages for each call"
        if message.get("role") == "assistant" and message.get("tool_calls"):
            expected = [call.get("id") for call in message["tool_calls"]]
    return "tool calls without their results at the end of the messages" if expected else None


ReplyFn = Callable[[dict[str, Any]], str]

_TAG = re.compile(r"<customer_message>\n(.*?)\n</customer_message>", re.S)


def customer_texts(body: dict[str, Any]) -> list[str]:
    """The customer's texts in a request, oldest first (summary-call turns included)."""
    texts: list[str] = []
    for message in body["messages"]:
        texts.extend(_TAG.findall(text_of(message.get("content"))))
    return texts


def is_note_request(body: dict[str, Any]) -> bool:
    first = (body.get("messages") or [{}])[0]
    return text_of(first.get("content")).startswith("You write the support team's notes about images")


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


def is_summary_request(body: dict[str, Any]) -> bool:
    """A summary call: it asks for a response format, or (plain instructions) its data carries the
    previous summary block."""
    if "response_format" in body:
        return True
    messages = body.get("messages") or []
    return bool(messages) and "<previous_summary>" in str(messages[-1].get("content") or "")


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
    gate: asyncio.Event | None = None
    """While set to an Event not yet set, completion requests are recorded on arrival and answered once
    it is (a model call held for as long as a test needs, e.g. to kill the worker waiting on it)."""
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
    # --- provider faults (issue 26) ---
    always: StubError | None = None
    """When set, every completion request is answered with this error (a persistent 429, a revoked key)."""
    request_times: list[float] = field(default_factory=list)
    """``time.monotonic()`` at the arrival of each completion request, in the order of ``requests``."""
    # --- response_format support (OpenAI-compatible servers differ) ---
    summary_format_support: str = "all"
    """What the server does with ``response_format``: ``all`` (json_schema and json_object honoured);
    ``json_object`` (json_schema answered 400, json_object honoured); ``reject`` (any response_format
    answered 400; a summary asked for without one comes back in a ```json fence); ``ignore`` (it is
    ignored: the JSON comes wrapped in prose); ``prose`` (ignored, and the model answers prose only)."""
    # --- provider outages (issue 26: promises kept, operator-visible outages) ---
    fail_with: int | None = None
    """When set, every completion is answered with this HTTP status (a persistent outage: 429, 503...)."""
    error_headers: dict[str, str] = field(default_factory=dict)
    """Headers sent with every error answer, e.g. ``{"retry-after": "2"}`` as providers send with 429/503."""
    embeddings: StubEmbeddings = field(default_factory=StubEmbeddings)
    """``POST /v1/embeddings`` (its requests and fault mode)."""
    transcriptions: StubTranscriptions = field(default_factory=StubTranscriptions)
    """``POST /v1/audio/transcriptions`` (its script, calls and fault modes)."""
    # --- a local server (issue 36) ---
    llama_cpp: bool = False
    """Answer as llama-cpp-python's server does (tests.stubs.llama_cpp): the ``developer`` role and a
    ``json_schema`` response format refused with its HTTP 500, ``max_completion_tokens`` ignored, the
    reply cut at ``max_tokens`` (finish_reason ``length``); one request at a time on its one model, and
    a stream interrupted as soon as another request waits (its ``interrupt_requests``, on by default):
    ``[DONE]`` after the chunk sent, no finish_reason."""
    llama_chunk_seconds: float = 0.0
    """In ``llama_cpp`` mode, the time the model takes per streamed chunk."""
    interrupted: int = 0
    """Streams cut short by another request (``llama_cpp`` mode)."""
    llama_await_rivals: int = 0
    """This many streams wait (up to 60 s) after their first chunk for another request to arrive, so a
    test's overlap is certain rather than a matter of timing."""
    _model: asyncio.Lock = field(default_factory=asyncio.Lock)
    _waiting: int = 0
    # --- image input (tests.stubs.vision) ---
    tools_support: Literal["all", "reject", "ignore"] = "all"
    """What the server does with ``tools``: honours them; ``reject``: 400 naming them (as a server
    without tool support does; the request again without tools is answered); ``ignore``: drops them
    (the model answers in text)."""
    vision: bool = True
    """False: image parts are refused with OpenAI's 400 for a model without vision."""
    image_rule: str = "gpt-4o"
    """The rule image parts are billed by (services.media.image_tokens), whatever the request's model."""
    image_tokens: list[int] = field(default_factory=list)
    """Image tokens billed in each request, in the order of ``requests`` (0 without images)."""
    image_note: Callable[[ImageInput], str] = lambda image: (
        f"an image of {image.size[0]}x{image.size[1]} pixels" if image.size else "an image"
    )
    """What the model "sees" in an image when asked for its note (prompts/image_note.py)."""

    @property
    def note_requests(self) -> list[dict[str, Any]]:
        """Requests for image notes (the instruction of prompts/image_note.py)."""
        return [r for r in self.requests if is_note_request(r)]

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if not is_summary_request(r) and not is_note_request(r)]

    @property
    def summary_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if is_summary_request(r)]

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/embeddings", self.embeddings.handle)
        app.router.add_post("/v1/audio/transcriptions", self.transcriptions.handle)
        # a request answered before its body was read (a 413) is drained for at most 1 s after the
        # answer (aiohttp's default, 10 s, made stopping the stub after such a test wait 10 s)
        self._runner = web.AppRunner(app, access_log=None, lingering_time=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sockets = site._server.sockets  # type: ignore[union-attr]
        self.base_url = f"http://{host}:{sockets[0].getsockname()[1]}/v1"
        return self.base_url

    async def stop(self) -> None:
        self.transcriptions.stop()
        self.embeddings.stop()
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
        self.request_times.append(started)
        if self.gate is not None:
            await self.gate.wait()
        if self.llama_cpp:
            self._waiting += 1
            async with self._model:
                self._waiting -= 1
                response = await self._answer(request, body)
        else:
            response = await self._answer(request, body)
        if self.on_handled is not None:
            self.on_handled(body, time.monotonic() - started)
        return response

    async def _answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        images, image_refused, prompt, cached = self._metered(body)
        early = await self._before_reply(body, image_refused)
        if early is not None:
            return early
        reply, is_summary = self._chosen_reply(body, images)
        if isinstance(reply, int):
            return self._error_answer(reply)
        if isinstance(reply, StubError):
            return _error_response(reply)
        if isinstance(reply, StubBroken):
            return await self._broken(request, body, reply)
        if is_summary:
            reply = self._summary_as_served(body, reply)
        reply, finish, tools = _finish_of(reply)
        if tools and (self.tools_support == "ignore" or body.get("tool_choice") == "none"):
            reply, finish, tools = "(the model wrote a call as text: " + json.dumps(tools) + ")", "stop", []
        reply, finish = self._capped(reply, body, finish)
        usage = self._usage(prompt, reply, cached)
        calls = [(f"call_{len(self.requests)}_{n}", name, arguments) for n, (name, arguments) in enumerate(tools)]
        if body.get("stream"):
            return await self._stream(request, body, reply, finish, usage, calls)
        return _completion(body, reply, finish, usage, calls)

    def _metered(self, body: dict[str, Any]) -> tuple[list[ImageInput], web.Response | None, array[int], int]:
        """The request's images, the refusal they get (if any), its prompt as the tokenizer sees it and
        the cached tokens of that prompt; the cache, cached and image token figures recorded."""
        images = images_in(body)
        image_refused = image_refusal(images, vision=self.vision)
        contents = [
            self._content(i, m.get("content"), images, image_refused is None) for i, m in enumerate(body["messages"])
        ]
        prompt = self._tokens.prompt((m["role"], c) for m, c in zip(body["messages"], contents, strict=True))
        cached = self._cache.lookup_and_store(str(body.get("model")), prompt)
        self.cached_tokens.append(cached)
        self.image_tokens.append(
            sum(p[1] for c in contents if not isinstance(c, str) for p in c if not isinstance(p, str))
        )
        return images, image_refused, prompt, cached

    async def _before_reply(self, body: dict[str, Any], image_refused: web.Response | None) -> web.Response | None:
        """After the latency: the answer of a server that is down, always fails or refuses the
        request; None to answer it."""
        delay = self.delays.popleft() if self.delays else self.latency
        if delay:
            await asyncio.sleep(delay)
        if self.down:
            return web.json_response({"error": {"message": "down", "type": "server_error"}}, status=503)
        if self.always is not None:
            return _error_response(self.always)
        problem = tool_protocol_error(body)
        if problem is not None:
            error = {"message": f"Invalid parameter: {problem}.", "type": "invalid_request_error", "param": "messages"}
            return web.json_response({"error": error}, status=400)
        if body.get("tools") and self.tools_support == "reject":
            error = {"message": "tools is not supported by this model", "type": "invalid_request_error",
                     "param": "tools", "code": None}  # fmt: skip
            return web.json_response({"error": error}, status=400)
        # Not ``or``: before aiohttp 3.10 a Response is an empty mapping, so it is falsy.
        return image_refused if image_refused is not None else self._response_format_refusal(body)

    def _chosen_reply(self, body: dict[str, Any], images: list[ImageInput]) -> tuple[Reply, bool]:
        """The reply (queued, the note of the images, or the reply function's) and whether the request
        is a summary one."""
        is_summary = is_summary_request(body)
        queue = self.summary_replies if is_summary else self.chat_replies
        reply: Reply
        if is_note_request(body):  # beside the chat replies: a test's queued replies are for those
            reply = "\n".join(f"{n}: {self.image_note(image)}" for n, image in enumerate(images, 1))
        else:
            reply = queue.popleft() if queue else (self.summary_reply if is_summary else self.chat_reply)(body)
        if self.fail_with is not None:
            reply = self.fail_with
        return reply, is_summary

    def _usage(self, prompt: array[int], reply: str, cached: int) -> dict[str, Any]:
        prompt_tokens, completion_tokens = self._tokens.billed(prompt), max(1, len(reply) // 4)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if self.usage_details:
            usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
        return usage

    def _content(self, index: int, content: Any, images: list[ImageInput], bill: bool) -> Content:
        """A message's content for the token count: its text, or its text and image parts (an image
        stands as one token id from its bytes, repeated as many times as the image costs)."""
        if not isinstance(content, list):
            return str(content or "")
        parts: list[str | tuple[int, int]] = []
        mine = {image.part: image for image in images if image.message == index}
        for position, part in enumerate(content):
            image = mine.get(position)
            if image is None:
                parts.append(text_of([part]))
            elif bill and image.size is not None and image.data is not None:
                tokens = parse_rule(self.image_rule).cost(*image.size, image.detail).tokens  # type: ignore[arg-type]
                parts.append((2_000_000 + int.from_bytes(hashlib.blake2b(image.data, digest_size=3).digest()), tokens))
        return parts

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
        calls: list[tuple[str, str, str]] | None = None,
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
            if self.llama_cpp and await self._interrupted(response):
                return response
        for index, (call_id, name, arguments) in enumerate(calls or ()):
            head = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
            await send({**base, "choices": [{"index": 0, "delta": {"tool_calls": [head]}, "finish_reason": None}]})
            for start in range(0, len(arguments), 8):
                piece = {"index": index, "function": {"arguments": arguments[start : start + 8]}}
                await send({**base, "choices": [{"index": 0, "delta": {"tool_calls": [piece]}, "finish_reason": None}]})
        await send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            await send({**base, "choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _interrupted(self, response: web.StreamResponse) -> bool:
        """llama-cpp-python's check after each chunk: another request waits for the model, so this
        stream ends here with ``[DONE]`` (no finish_reason)."""
        await asyncio.sleep(self.llama_chunk_seconds)
        if self.llama_await_rivals > 0:
            self.llama_await_rivals -= 1
            for _ in range(6000):
                if self._waiting:
                    break
                await asyncio.sleep(0.01)
        if not self._waiting:
            return False
        self.interrupted += 1
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return True

    # --- provider faults (issue 26) ---

    async def _broken(self, request: web.Request, body: dict[str, Any], reply: StubBroken) -> web.StreamResponse:
        base = {"id": "chatcmpl-stub", "created": int(time.time()), "model": body["model"]}
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply.text}
            whole = {**base, "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
            if reply.fault == "no_finish":
                whole["choices"][0]["finish_reason"] = None
                return web.json_response(whole)
            raw = json.dumps(whole).encode()
            if reply.fault == "cut":
                response = web.StreamResponse(
                    headers={"Content-Type": "application/json", "Content-Length": str(len(raw))}
                )
                await response.prepare(request)
                await response.write(raw[: len(raw) // 2])
                _drop_connection(request)
                return response
            broken = raw[:-3] if reply.fault == "malformed" else raw.replace(b'"content"', b'"cont\xff\xfeent"')
            return web.Response(body=broken, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = {**base, "object": "chat.completion.chunk"}
        for start in range(0, len(reply.text), self.stream_chunk_chars):
            delta = {"content": reply.text[start : start + self.stream_chunk_chars]}
            payload = {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(payload)}\n\n".encode())
        if reply.fault == "malformed":
            await response.write(b'data: {"id": "chatcmpl-stub", "choices": [{"index": 0, "delta": {"cont\n\n')
        elif reply.fault == "bad_utf8":
            await response.write(b'data: {"choices": [{"index": 0, "delta": {"content": "\xff\xfe"}}]}\n\n')
        elif reply.fault == "cut":
            await asyncio.sleep(0.05)  # the chunks so far reach the client, then the connection drops
            _drop_connection(request)
            return response
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _capped(self, reply: str, body: dict[str, Any], finish: str) -> tuple[str, str]:
        """In ``llama_cpp`` mode, the reply cut at the request's ``max_tokens`` (finish_reason length)."""
        if not self.llama_cpp:
            return reply, finish
        cut, capped = llama_cpp.capped(reply, body)
        return (cut, "length") if capped else (reply, finish)

    def _response_format_refusal(self, body: dict[str, Any]) -> web.Response | None:
        """In ``llama_cpp`` mode, that server's 500 for any request it does not validate (the role and
        the response format among them). Otherwise OpenAI's 400 for a response_format the model does
        not support (invalid_request_error, param ``response_format``); json_object also needs the
        word "json" in the messages, as OpenAI's does."""
        if self.llama_cpp and (refused := llama_cpp.refusal(body)) is not None:
            return web.json_response(refused[1], status=refused[0])
        kind = (body.get("response_format") or {}).get("type")
        mode = self.summary_format_support
        if kind is None or mode in ("all", "ignore", "prose"):
            return None
        if mode == "json_object" and kind == "json_object":
            if "json" in json.dumps(body["messages"]).lower():
                return None
            message, param = (
                "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
                "messages",
            )
        else:
            message = f"Invalid parameter: 'response_format' of type '{kind}' is not supported with this model."
            param = "response_format"
        error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
        return web.json_response({"error": error}, status=400)

    def _summary_as_served(self, body: dict[str, Any], reply: str) -> str:
        """The summary as a server of this mode's model answers it (see ``summary_format_support``)."""
        mode = self.summary_format_support
        honoured = "response_format" in body and mode in ("all", "json_object")
        if honoured or reply.startswith("<<") or (mode == "all" and "response_format" not in body):
            return reply
        if mode == "prose":
            return "The customer needs help with an order and support answered the questions so far."
        if mode == "reject":
            return f"```json\n{reply}\n```"
        prose = "Sure! Here is the updated summary of the conversation:"
        return f"{prose}\n\n```json\n{reply}\n```\n\nLet me know if you need more."


def _finish_of(reply: str) -> tuple[str, str, list[tuple[str, str]]]:
    """The reply, its finish reason and its tool calls, from the reply's prefix (``<<length>>``,
    ``FINISH_PREFIX``, ``TOOL_PREFIX``, ``TOOLS_PREFIX``)."""
    finish = "stop"
    tools: list[tuple[str, str]] = []
    if reply.startswith(TOOLS_PREFIX):
        calls = json.loads(reply.removeprefix(TOOLS_PREFIX))
        tools, reply, finish = [(str(name), str(arguments)) for name, arguments in calls], "", "tool_calls"
    elif reply.startswith("<<length>>"):
        reply, finish = reply.removeprefix("<<length>>"), "length"
    elif reply.startswith(FINISH_PREFIX):
        finish, reply = reply.removeprefix(FINISH_PREFIX).split(">>", 1)
    elif reply.startswith(TOOL_PREFIX):
        name, arguments = reply.removeprefix(TOOL_PREFIX).split(">>", 1)
        tools, reply, finish = [(name, arguments)], "", "tool_calls"
    return reply, finish, tools


def _completion(
    body: dict[str, Any], reply: str, finish: str, usage: dict[str, Any], calls: list[tuple[str, str, str]]
) -> web.Response:
    """A non-streamed chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": reply or None}
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in calls
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


def _error_response(error: StubError) -> web.Response:
    payload = error.payload()
    if isinstance(payload, str):
        return web.Response(text=payload, status=error.status, headers=error.headers)
    return web.json_response(payload, status=error.status, headers=error.headers)


def _drop_connection(request: web.Request) -> None:
    """Close the socket under a response in progress (a proxy or a crashing server cutting it)."""
    if request.transport is not None:
        request.transport.close()
