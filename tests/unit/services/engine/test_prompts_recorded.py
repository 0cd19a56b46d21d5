"""A recorded conversation: every prompt the engine sends to the model, byte for byte.

A scripted conversation runs through real ChatServices (fakeredis store, grounding over a small
knowledge snapshot, image notes, the handoff tool) with a recording fake model: every chat prompt
(roles, content, images, tools), every summary request and every image-note request, and the
deterministic fields of every turn's result, are compared with tests/data/prompts_recorded.json.
The script forces compaction (before a reply and after it), knowledge placed dynamically and
statically, citations, a handoff, photos (at full and at low detail), a voice transcript, a
concurrent update that retries the turn, a refused image request, a redelivered turn and two
unreadable sessions (a summary that does not decode, a history not made of whole turns).

Regenerate the golden file (only when a prompt is meant to change) with
``RECORD_PROMPTS=1 .venv/bin/python -m pytest -p no:cacheprovider tests/unit/services/engine/test_prompts_recorded.py``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import fakeredis
from PIL import Image

from prompts import default_registry
from prompts.support_chat import HANDOFF_TOOL, knowledge_rules
from services.backends.redis.keys import KeySpace
from services.backends.redis.store import RedisSessionStore
from services.core.errors import LLMRequestRejectedError, SupportBotError
from services.core.knowledge import Passage
from services.core.records import Completion, ImagePart, MediaRef, OnDelta, PromptPart, ToolCall
from services.core.tokens import TokenCounter
from services.core.turn_media import TurnImage, TurnMedia
from services.core.turns import CompactionReport, TurnResult
from services.engine.chat import ChatService
from services.engine.grounding import Grounding
from services.engine.turn_steps import TurnStep
from services.knowledge.snapshot import IndexSnapshot
from services.media.image_tokens import image_cost
from services.media.notes import ImageNotes
from services.memory.policy import WaterMarkPolicy
from services.memory.summarizer import Summarizer
from tests.helpers import customer_line

GOLDEN = Path(__file__).resolve().parents[4] / "tests" / "data" / "prompts_recorded.json"

PASSAGES = [
    Passage(
        "p1",
        "returns.md",
        "Returns",
        ("Refunds",),
        "Refunds are paid to the original card within 14 days of the parcel reaching the warehouse.",
        20,
        url="https://help.example.com/returns",
    ),
    Passage("p2", "delivery.md", "Delivery", ("Times",), "Standard delivery takes 3-5 working days.", 9),
    Passage("p3", "delivery.md", "Delivery", ("Couriers",), "The courier calls an hour before arriving.", 9),
    Passage("p4", "warranty.md", "Warranty", ("Terms",), "Monitors carry a two year warranty.", 8),
]


def _digest(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def _part(part: PromptPart) -> dict[str, Any]:
    record: dict[str, Any] = {"role": part.role, "content": part.content, "tokens": part.tokens}
    if part.images:
        record["images"] = [{"url": _digest(i.url), "detail": i.detail, "tokens": i.tokens} for i in part.images]
    return record


Reply = str | ToolCall | Exception | Callable[[], Awaitable[str]]


class RecordingModel:
    """The ChatModel (and SummaryModel) contract, recording what it is asked and answering from a script:
    a queued reply (text, tool call, exception, or a coroutine run during the call) or, by default, an
    answer naming the new message with citation markers (one of a passage never sent)."""

    def __init__(self) -> None:
        self.chats: list[dict[str, Any]] = []
        self.summaries: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []
        self.replies: deque[Reply] = deque()

    async def chat(
        self,
        messages: Sequence[PromptPart],
        *,
        on_delta: OnDelta | None = None,
        tools: Sequence[dict[str, Any]] = (),
        chat_id: int | None = None,
    ) -> Completion:
        self.chats.append(
            {"chat_id": chat_id, "messages": [_part(m) for m in messages], "tools": [dict(t) for t in tools]}
        )
        reply = self.replies.popleft() if self.replies else None
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, ToolCall):
            return Completion("", "tool_calls", None, "fake", 0.0, tool_call=reply)
        if callable(reply):
            reply = await reply()
        if reply is None:
            last = messages[-1].content.splitlines()
            reply = f"Answer {len(self.chats)} to {last[1][:40] if len(last) > 1 else last[0][:40]!r} [K1] [K9]"
        if on_delta is not None:
            await on_delta(reply)
        return Completion(reply, "stop", None, "fake", 0.0)

    async def describe(self, messages: Sequence[PromptPart], *, max_tokens: int) -> Completion:
        self.notes.append({"messages": [_part(m) for m in messages], "max_tokens": max_tokens})
        count = sum(len(m.images) for m in messages)
        text = "\n".join(f"a cracked monitor stand, photo {i + 1}" for i in range(count))
        return Completion(text, "stop", None, "fake", 0.0)

    async def summarize(
        self, messages: Sequence[PromptPart], *, schema: dict[str, Any], response_format: str | None = None
    ) -> Completion:
        self.summaries.append({"messages": [_part(m) for m in messages], "response_format": response_format})
        lines = [line for line in messages[-1].content.splitlines() if line.startswith("Message")]
        summary = {
            "topic": "delivery questions",
            "key_facts": [line[:60] for line in lines][:6],
            "actions_taken": ["support answered"],
            "decisions": [],
            "pending_questions": [],
            "next_step": "keep helping",
        }
        return Completion(json.dumps(summary), "stop", None, "fake", 0.0)

    async def close(self) -> None:
        return None


class Source:
    def __init__(self) -> None:
        self.snapshot = IndexSnapshot.build(passages=PASSAGES, min_score=0.2)

    def current(self) -> IndexSnapshot:
        return self.snapshot


def build(
    model: RecordingModel,
    store: RedisSessionStore,
    counter: TokenCounter,
    *,
    static: bool,
    notes: bool,
    after_answer: Sequence[TurnStep] = (),
) -> ChatService:
    registry = default_registry()
    summarizer = Summarizer(llm=model, counter=counter, prompt=registry.get("summary"), max_tokens=200)
    grounding = Grounding(
        source=Source(), counter=counter, role="system", budget=200, top_k=3, static_tokens=400 if static else 0
    )
    return ChatService(
        store=store,
        llm=model,
        summarizer=summarizer,
        counter=counter,
        instruction=registry.get("support_chat").render(
            company="ACME", handoff="", knowledge=knowledge_rules(handoff=True)
        ),
        instruction_role="system",
        budget=1300,
        summary_max_tokens=200,
        policy=WaterMarkPolicy(),
        handoff_tool=True,
        grounding=grounding,
        notes=ImageNotes(
            llm=model,
            counter=counter,
            instruction=registry.get("image_note").render(max_words=30),
            role="system",
        )
        if notes
        else None,
        after_answer=after_answer,
    )


def photo(width: int, height: int, unique: str) -> TurnImage:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, "JPEG")
    url = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()
    part = ImagePart(url, "high", image_cost(width, height, model="gpt-4o", detail="high").tokens)
    low = ImagePart(url, "low", image_cost(width, height, model="gpt-4o", detail="low").tokens)
    return TurnImage(part=part, low=low, file_unique_id=unique)


def photos(*images: TurnImage) -> TurnMedia:
    return TurnMedia(images=images, refs=tuple(MediaRef("photo", f"file-{i.file_unique_id}") for i in images))


def _report(report: CompactionReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {
        "folded_messages": report.folded_messages,
        "failed": report.failed,
        "restored_identifiers": report.restored_identifiers,
        "summary_tokens": report.summary_tokens,
        "extractive": report.extractive,
    }


def _result(result: TurnResult) -> dict[str, Any]:
    return {
        "reply": result.reply,
        "duplicate": result.duplicate,
        "version": result.version,
        "estimated_tokens": result.estimated_tokens,
        "context_history_messages": result.context_history_messages,
        "removed_history_messages": result.removed_history_messages,
        "stored_messages": result.stored_messages,
        "summary_present": result.summary_present,
        "forced_compaction": _report(result.forced_compaction),
        "proactive_compaction": _report(result.proactive_compaction),
        "attempts": result.attempts,
        "history_tokens": result.history_tokens,
        "redelivered": result.redelivered,
        "quarantined": result.quarantined,
        "handoff_reason": result.handoff_reason,
        "knowledge": [[s.passage.id, round(s.score, 6)] for s in result.knowledge],
        "knowledge_matched": result.knowledge_matched,
        "knowledge_degraded": result.knowledge_degraded,
        "cited": list(result.cited),
    }


async def run_script(counter: TokenCounter) -> dict[str, Any]:
    model = RecordingModel()
    redis = fakeredis.FakeAsyncRedis()
    keys = KeySpace("t", "123456")
    store = RedisSessionStore(redis=redis, keys=keys)
    dynamic = build(model, store, counter, static=False, notes=True)
    static = build(model, store, counter, static=True, notes=False)
    turns: list[dict[str, Any]] = []
    restarts: list[int] = []
    delivered: list[str] = []

    async def deliver(result: TurnResult) -> None:
        delivered.append(result.reply)

    async def turn(service: ChatService, chat_id: int, text: str, **kwargs: Any) -> None:
        try:
            result = await service.handle(
                chat_id, text, deliver=deliver, on_restart=lambda: restarts.append(chat_id), **kwargs
            )
        except SupportBotError as exc:
            turns.append({"chat_id": chat_id, "text": text, "error": f"{type(exc).__name__}: {exc}"})
            return
        turns.append({"chat_id": chat_id, "text": text, "result": _result(result)})

    # a long conversation with knowledge: forced and proactive compaction, citations
    await turn(dynamic, 1, "When will my refund be paid to my card?")
    await turn(dynamic, 1, "And how long does standard delivery take?")
    for n in range(14):
        await turn(dynamic, 1, customer_line(n), turn_id=f"a{n}")
    # a photo, then a large album that only fits at low detail, then a voice message
    await turn(dynamic, 1, "It arrived like this", media=photos(photo(640, 480, "uq1")))
    await turn(dynamic, 1, "", media=photos(*(photo(2048, 1536, f"big{i}") for i in range(4))))
    await turn(dynamic, 1, "", media=TurnMedia(transcript="the courier never called me", refs=()))
    # the handoff tool, then a tool the bot does not know
    model.replies.append(ToolCall(HANDOFF_TOOL, json.dumps({"reason": "the customer asks for a person"})))
    await turn(dynamic, 1, "I want to talk to a person now")
    model.replies.append(ToolCall("delete_everything", "{}"))
    await turn(dynamic, 1, "Please do something odd")
    # a model without vision
    model.replies.append(LLMRequestRejectedError("image_url is not supported"))
    await turn(dynamic, 1, "Look at this one", media=photos(photo(320, 240, "uq2")))

    # another writer changes the chat during the model call: the turn is produced again
    async def interfere() -> str:
        await store.reset(1)
        return "first attempt, lost"

    model.replies.append(interfere)
    await turn(dynamic, 1, "Is my monitor under warranty?")

    # static knowledge: all the documents after the instruction
    for question in ("Do couriers call before arriving?", "What about refunds?", customer_line(40)):
        await turn(static, 2, question)

    # redelivery: committed, the reply maybe not sent, then an answered turn again
    await dynamic.respond(3, "where is order 7718?", turn_id="r1")
    await turn(dynamic, 3, "where is order 7718?", turn_id="r1")
    await turn(dynamic, 3, "where is order 7718?", turn_id="r1")
    # unreadable sessions are quarantined and the chat starts over
    await turn(dynamic, 3, "and now?")
    await redis.hset(keys.chat(3).meta, "summary", b"{not json")
    await turn(dynamic, 3, "the summary is broken", turn_id="r2")
    await turn(dynamic, 4, "a first question")
    await redis.rpop(keys.chat(4).msgs)
    await turn(dynamic, 4, "the history lost its last reply")
    return {
        "chats": model.chats,
        "summaries": model.summaries,
        "notes": model.notes,
        "turns": turns,
        "restarts": restarts,
        "delivered": delivered,
    }


async def test_the_prompts_of_a_recorded_conversation_are_unchanged(counter: TokenCounter) -> None:
    recorded = await run_script(counter)
    text = json.dumps(recorded, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    if os.environ.get("RECORD_PROMPTS"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text, encoding="utf-8")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    for kind in ("chats", "summaries", "notes", "turns", "restarts", "delivered"):
        assert len(recorded[kind]) == len(golden[kind]), kind
        for index, (got, want) in enumerate(zip(recorded[kind], golden[kind], strict=True)):
            assert got == want, f"{kind}[{index}] differs"
    assert text == GOLDEN.read_text(encoding="utf-8")
