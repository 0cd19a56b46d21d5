"""A fault-injecting HTTP proxy between the bot and the stub model server (benchmarks/chaos.py).

A question's first model requests may get a fault, chosen from the seed and the question (a run
repeats): the answer cut inside its end marker with no finish reason (a clean end, or the connection
dropped), a malformed chunk or body, a storm of 429s with Retry-After / retry-after-ms. ``storm`` and
``outage`` answer every request 429 / 503 for a while. Every request is logged (times, question,
fault, status, the wait asked for), so the benchmark can check that Retry-After was honoured.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from benchmarks.common import percentile
from bot.telegram.texts import TEXTS, text
from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis
from services.ports.deadletters import DeadLetter
from services.ports.queue import item_id_of
from services.ports.sessions import SessionStore
from tests.e2e.scenario import Expected, answered, customer_text, expected_reply
from tests.stubs.openai_server import customer_texts, echo_reply
from tests.stubs.telegram_server import StubTelegram

END = " (end)"
"""Every complete answer of the stub ends with this; a cut answer keeps " (" at most: recognisable."""
FAULTS = ("no_finish", "cut", "malformed", "rate_limited")
RETRY_AFTER_SLACK = 0.05
"""A request this much earlier than the Retry-After asked is still on time (clock and loop jitter)."""
_QUESTION = re.compile(r"^c(-?\d+) m(\d+)$")

Question = tuple[int, int]


def marked_reply(body: dict[str, Any]) -> str:
    """The stub's reply with the end marker (give it to ``StubOpenAI(chat_reply=...)``)."""
    return echo_reply(body) + END


def question_of(body: dict[str, Any]) -> Question | None:
    """(chat, message number) of the newest customer text in a request, None if it is no benchmark's."""
    texts = customer_texts(body)
    match = _QUESTION.match(texts[-1]) if texts else None
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True)
class Plan:
    """What a question's model requests get: ``fault`` for the first ``times`` ones, then the answer."""

    fault: str = "ok"
    times: int = 0
    header: tuple[str, str] | None = None
    """For rate_limited: the header telling the wait (``retry-after`` or ``retry-after-ms``)."""


def plan_for(seed: int, question: Question) -> Plan:
    rng = random.Random(f"{seed}:{question[0]}:{question[1]}")
    roll = rng.random()
    if roll < 0.6:
        return Plan()
    if roll < 0.84:
        return Plan(FAULTS[int((roll - 0.6) / 0.08)], times=rng.randint(1, 2))
    header = ("retry-after", "1") if rng.random() < 0.5 else ("retry-after-ms", str(rng.randint(500, 1500)))
    return Plan("rate_limited", times=rng.randint(2, 4), header=header)


@dataclass
class Logged:
    at: float
    """When the request arrived (monotonic), and below when its answer was written."""
    done: float
    question: Question | None
    summary: bool
    stream: bool
    fault: str
    status: int
    retry_after: float | None
    wall: float = 0.0
    """When the request arrived (wall clock), to match the workers' logs."""


@dataclass
class FaultProxy:
    upstream: str
    """The stub model server's base URL (ends in /v1)."""
    seed: int
    enabled: bool = True
    log: list[Logged] = field(default_factory=list)
    base_url: str = ""
    _storm_until: float = 0.0
    _outage_until: float = 0.0
    _seen: Counter[tuple[Question | None, bool]] = field(default_factory=Counter)
    _runner: web.AppRunner | None = None
    _http: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._http = aiohttp.ClientSession()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def storm(self, seconds: float) -> None:
        """Every request gets 429 with ``Retry-After: 1`` for ``seconds``."""
        self._storm_until = time.monotonic() + seconds

    def outage(self, seconds: float) -> None:
        """Every request gets 503 (no Retry-After) for ``seconds``."""
        self._outage_until = time.monotonic() + seconds

    async def _models(self, request: web.Request) -> web.Response:
        assert self._http is not None
        headers = {"Authorization": request.headers.get("Authorization", "")}
        async with self._http.get(f"{self.upstream}/models", headers=headers) as upstream:
            return web.Response(body=await upstream.read(), status=upstream.status, content_type="application/json")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        at, wall = time.monotonic(), time.time()
        raw = await request.read()
        body = json.loads(raw)
        question, summary, stream = question_of(body), "response_format" in body, bool(body.get("stream"))
        attempt = self._seen[(question, summary)]  # of the requests outside a storm or outage
        plan = plan_for(self.seed, question) if self.enabled and question and not summary else Plan()
        fault, header = "ok", plan.header
        if at < self._outage_until:
            fault, header = "outage", None
        elif at < self._storm_until:
            fault, header = "rate_limited", ("retry-after", "1")
        else:
            self._seen[(question, summary)] += 1
            fault = plan.fault if attempt < plan.times else "ok"
        rng = random.Random(f"{self.seed}:{question}:{summary}:{attempt}:{fault}")
        try:
            response, status, wait = await self._answer(request, raw, fault, header, stream, rng)
        except ConnectionResetError:  # the bot gave up the request (a worker killed, a turn cancelled)
            response, status, wait = web.Response(status=500), 0, None
        self.log.append(Logged(at, time.monotonic(), question, summary, stream, fault, status, wait, wall))
        return response

    async def _answer(
        self,
        request: web.Request,
        raw: bytes,
        fault: str,
        header: tuple[str, str] | None,
        stream: bool,
        rng: random.Random,
    ) -> tuple[web.StreamResponse, int, float | None]:
        if fault == "outage":
            error = {"message": "The server is overloaded or not ready yet.", "type": "server_error"}
            return web.json_response({"error": error | {"param": None, "code": None}}, status=503), 503, None
        if fault == "rate_limited":
            assert header is not None
            wait = float(header[1]) / (1000 if header[0] == "retry-after-ms" else 1)
            error = {"message": "Rate limit reached for requests", "type": "requests", "param": None}
            body = {"error": error | {"code": "rate_limit_exceeded"}}
            return web.json_response(body, status=429, headers=dict([header])), 429, wait
        assert self._http is not None
        headers = {"Authorization": request.headers.get("Authorization", ""), "Content-Type": "application/json"}
        async with self._http.post(f"{self.upstream}/chat/completions", data=raw, headers=headers) as upstream:
            status, data = upstream.status, await upstream.read()
            content_type = upstream.headers.get("Content-Type", "application/json")
        if status != 200 or fault == "ok":
            return web.Response(body=data, status=status, headers={"Content-Type": content_type}), status, None
        if stream:
            return await _faulty_stream(request, data, fault, rng), 200, None
        return await _faulty_body(request, data, fault, rng), 200, None


def cut(text: str, rng: random.Random) -> str:
    """The text cut inside its end marker (or, without one, in its second half)."""
    if text.endswith(END):
        return text[: len(text) - len(END) + rng.randint(2, len(END) - 1)]
    return text[: max(1, len(text) // 2 + rng.randint(0, max(0, len(text) // 2 - 1)))]


async def _faulty_stream(request: web.Request, data: bytes, fault: str, rng: random.Random) -> web.StreamResponse:
    events = [line[6:] for line in data.decode().split("\n") if line.startswith("data: ")]
    chunks: list[dict[str, Any]] = [json.loads(e) for e in events if e != "[DONE]"]
    whole = "".join(str((c["choices"][0].get("delta") or {}).get("content") or "") for c in chunks if c.get("choices"))
    head = {key: chunks[0][key] for key in ("id", "object", "created", "model")} if chunks else {}
    short = cut(whole, rng)
    split = rng.randint(1, len(short) - 1) if len(short) > 1 else len(short)
    out = [
        json.dumps(head | {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        for piece in (short[:split], short[split:])
        if piece
    ]
    if fault == "malformed":  # the rest of the answer after a chunk that is no JSON
        out = [out[0], '{"id": "chatcmpl-stub", "choices": [{"delta": {"content": "', *out[1:]]
    usage = [json.dumps(c) for c in chunks if not c.get("choices") and c.get("usage")]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for event in out:
        await response.write(f"data: {event}\n\n".encode())
    if fault == "cut":  # the connection drops: no finish reason, no usage, no [DONE], no last chunk
        assert request.transport is not None
        request.transport.close()
        return response
    for event in usage:
        await response.write(f"data: {event}\n\n".encode())
    if rng.random() < 0.5:  # a clean end, with or without [DONE]
        await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _faulty_body(request: web.Request, data: bytes, fault: str, rng: random.Random) -> web.StreamResponse:
    if fault == "malformed":
        return web.Response(body=data[: len(data) // 2], status=200, content_type="application/json")
    completion = json.loads(data)
    choice = completion["choices"][0]
    choice["finish_reason"] = None
    choice["message"]["content"] = cut(str(choice["message"].get("content") or ""), rng)
    body = json.dumps(completion).encode()
    if fault == "no_finish":
        return web.Response(body=body, status=200, content_type="application/json")
    # cut: the headers promise the whole body, the connection drops half-way
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body[: len(body) // 2])
    assert request.transport is not None
    request.transport.close()
    return response


# --- what the run shows: from the Bot API calls, the stored sessions, the dead letters and the log ---
NOT_FINAL = frozenset(text(language, key) for language in TEXTS for key in ("llm_retrying", "session_lost"))
"""Texts that promise or announce more to come: a chat whose last word is one of these ended in silence."""


def complete_reply(chat: int, n: int) -> str:
    return expected_reply(chat, n) + END


@dataclass
class Figures:
    faults: Counter[str]
    truncated_delivered: int
    truncated_stored: int
    silent: int
    """Customer messages with neither an answer nor a final text (an error or could-not-answer one)."""
    given_up: int
    unresolved: int
    """Customer messages with no complete answer that were not given up either."""
    lost: int
    """Customer messages neither stored nor given up."""
    early_retries: int
    early: list[str]
    waits_asked: int
    requests_p50: float
    requests_max: int
    summary_calls: int

    def line(self) -> str:
        return (
            f"truncated_delivered={self.truncated_delivered} truncated_stored={self.truncated_stored} "
            f"ended_in_silence={self.silent} given_up={self.given_up} unresolved={self.unresolved} "
            f"lost={self.lost} retries_before_retry_after="
            f"{self.early_retries} (of {self.waits_asked} answers asking to wait) model_requests_per_question "
            f"p50={self.requests_p50:.0f} max={self.requests_max} summary_calls={self.summary_calls}"
        )


def truncated_of(value: str, replies: dict[str, int]) -> int | None:
    """The message number whose complete reply ``value`` is a cut copy of, else None."""
    head, marker, tail = value.rpartition(" (")
    return replies.get(head) if marker and "(end)".startswith(f"({tail}") and f" ({tail}" != END else None


@dataclass
class _Tally:
    """The per-message counts of ``figures``, summed over the chats."""

    truncated_delivered: int = 0
    truncated_stored: int = 0
    silent: int = 0
    lost: int = 0
    unresolved: int = 0


def _delivered(
    values: list[str], replies: dict[str, int], complete: set[str], tally: _Tally
) -> tuple[set[int], set[int], int]:
    """Of one chat's sent texts: the messages answered in full, those answered only cut short (each cut
    copy counted in ``tally``), and how many other final texts went out."""
    answered: set[int] = set()
    cut_only: set[int] = set()
    finals = 0
    for value in values:
        cut_of = truncated_of(value, replies)
        if value in complete:
            answered.add(replies[value.removesuffix(END)])
        elif cut_of is not None:
            tally.truncated_delivered += 1
            cut_only.add(cut_of)
        elif value not in NOT_FINAL:
            finals += 1
    return answered, cut_only, finals


async def _tally_chat(
    chat: int, messages: int, values: list[str], given_up: set[Question], store: SessionStore, tally: _Tally
) -> None:
    """Add one chat's silent, unresolved, cut and lost messages to ``tally``."""
    replies = {expected_reply(chat, n): n for n in range(messages)}
    complete = {complete_reply(chat, n) for n in range(messages)}
    answered, cut_only, finals = _delivered(values, replies, complete, tally)
    tally.silent += max(0, messages - len(answered | cut_only) - finals)
    tally.unresolved += sum(1 for n in range(messages) if n not in answered and (chat, n) not in given_up)
    session = await store.load(chat)
    users = {m.content for m in session.messages if m.role == "user"}
    stored = [m.content for m in session.messages if m.role == "assistant"]
    tally.truncated_stored += sum(1 for value in stored if truncated_of(value, replies) is not None)
    tally.lost += sum(1 for n in range(messages) if customer_text(chat, n) not in users and (chat, n) not in given_up)


async def figures(
    proxy: FaultProxy,
    telegram: StubTelegram,
    store: SessionStore,
    chats: list[int],
    messages: int,
    dead: list[DeadLetter],
    update_ids: dict[Question, int],
    taken_over: Mapping[int, Sequence[float]] | None = None,
    lease: float = 0.0,
) -> Figures:
    sent: dict[int, list[str]] = {}
    for call in telegram.of("sendMessage"):
        sent.setdefault(int(call.params["chat_id"]), []).append(str(call.params.get("text")))
    by_update = {item_id_of(update): question for question, update in update_ids.items()}
    given_up = {by_update[letter.item_id] for letter in dead if letter.item_id in by_update}
    tally = _Tally()
    for chat in chats:
        await _tally_chat(chat, messages, sent.get(chat, []), given_up, store, tally)
    wanted = set(chats)
    per_question = Counter(r.question for r in proxy.log if not r.summary and r.question and r.question[0] in wanted)
    counts = [per_question[(chat, n)] for chat in chats for n in range(messages) if per_question[(chat, n)]]
    return Figures(
        faults=Counter(r.fault for r in proxy.log),
        truncated_delivered=tally.truncated_delivered,
        truncated_stored=tally.truncated_stored,
        silent=tally.silent,
        given_up=len(given_up),
        unresolved=tally.unresolved,
        lost=tally.lost,
        early_retries=len(early := early_retries(proxy.log, taken_over or {}, lease)),
        early=early,
        waits_asked=sum(1 for r in proxy.log if r.retry_after is not None),
        requests_p50=percentile([float(c) for c in counts], 50) if counts else 0.0,
        requests_max=max(counts, default=0),
        summary_calls=sum(1 for r in proxy.log if r.summary),
    )


def early_retries(
    log: list[Logged], taken_over: Mapping[int, Sequence[float]] | None = None, lease: float = 0.0
) -> list[str]:
    """Requests for a question (its chat or its summary calls) that came sooner than the wait its
    previous answer asked for (Retry-After / retry-after-ms), each as a line saying so. Not one from
    another worker (the other transport) while the chat changed hands under a running attempt
    (``taken_over``: chat → wall times a worker found another holding its lease): that worker took the
    chat before the 429 was recorded on the question, and never saw it."""
    last: dict[tuple[Question | None, bool], Logged] = {}
    early = []
    for request in sorted(log, key=lambda r: r.at):
        key = (request.question, request.summary)
        before = last.get(key)
        if request.question is not None and before is not None and before.retry_after is not None:
            waited = request.at - before.done
            handed = request.stream != before.stream and any(
                before.wall - lease <= at <= request.wall + 2 * lease
                for at in (taken_over or {}).get(request.question[0], ())
            )
            if waited < before.retry_after - RETRY_AFTER_SLACK and not handed:
                early.append(f"{request.question}: {waited:.2f}s after a {before.status} asking {before.retry_after}s")
        last[key] = request
    return early


async def wait_settled(
    telegram: StubTelegram,
    redis: AnyRedis,
    keys: KeySpace,
    chats: list[int],
    messages: int,
    reply: Expected,
    within: float,
) -> None:
    """Until every message is answered, or no chat has queued work and the bot has been quiet for a
    second (the rest given up or answered with something else: the figures tell)."""
    deadline = time.monotonic() + within
    calls = -1
    while answered(telegram, chats, messages, reply) < len(chats) * messages:
        if time.monotonic() > deadline:
            raise AssertionError(f"not settled in {within}s")
        if len(telegram.calls) == calls and not await queued_chats(redis, keys):
            return
        calls = len(telegram.calls)
        await asyncio.sleep(1.0)


async def queued_chats(redis: AnyRedis, keys: KeySpace) -> int:
    found = 0
    async for key in redis.scan_iter(match=keys.chat_pattern("inbox"), count=1000):
        found += 1 if await redis.zcard(key) else 0
    return found
