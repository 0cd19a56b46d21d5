"""The turn as steps (services.engine.turn_steps): listed once, in order; one more step is one more
constructor argument (``after_answer``) that sees what the steps before it wrote, offers the model its
tools and counts its model calls; a side effect kept on the request is not repeated by a retry; a
step run before the one it needs fails loudly."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import fakeredis
import pytest

from services.backends.redis.keys import KeySpace
from services.backends.redis.store import RedisSessionStore
from services.core.records import Completion, OnDelta, PromptPart, Usage
from services.core.tokens import TokenCounter
from services.engine.turn_steps import Answer, Commit, FitWindow, Reply, TurnDraft, need, once
from tests.unit.services.engine.test_prompts_recorded import RecordingModel, build

LOOKUP = {"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}


async def noop(_result: object) -> None:
    return None


def store() -> RedisSessionStore:
    return RedisSessionStore(redis=fakeredis.FakeAsyncRedis(), keys=KeySpace("t", "123456"))


def names(steps: tuple[object, ...]) -> list[str]:
    return [type(step).__name__ for step in steps]


def test_the_steps_are_listed_in_order(counter: TokenCounter) -> None:
    service = build(RecordingModel(), store(), counter, static=False, notes=False)
    assert names(service.steps) == ["FitWindow", "Ground", "Answer", "Reply", "Commit", "RecordGap"]


async def test_one_more_step_is_one_more_entry(counter: TokenCounter) -> None:
    """A step between the model's answer and the reply sees the window and the completion, and may
    change the draft before the reply is made of it (as the tool loop will)."""
    seen: list[tuple[int, str]] = []

    class Shout:
        async def run(self, draft: TurnDraft) -> None:
            completion = need(draft.completion, "completion")
            seen.append((len(need(draft.window, "window").messages), completion.text))
            draft.completion = type(completion)(
                completion.text.upper(), completion.finish_reason, None, completion.model, 0.0
            )

    model = RecordingModel()
    service = build(model, store(), counter, static=False, notes=False, after_answer=[Shout()])
    assert names(service.steps) == ["FitWindow", "Ground", "Answer", "Shout", "Reply", "Commit", "RecordGap"]
    model.replies.append("thanks, that is all")
    result = await service.handle(1, "Where is my refund?", deliver=noop)
    assert seen == [(3, "thanks, that is all")]  # the instruction, the knowledge, the new message
    assert result.reply == "THANKS, THAT IS ALL" and result.stored_messages == 2


class MeteredModel(RecordingModel):
    """Every completion with usage and seconds, as a real provider reports them."""

    async def chat(
        self,
        messages: Sequence[PromptPart],
        *,
        on_delta: OnDelta | None = None,
        tools: Sequence[dict[str, Any]] = (),
        chat_id: int | None = None,
    ) -> Completion:
        completion = await super().chat(messages, on_delta=on_delta, tools=tools, chat_id=chat_id)
        return replace(completion, usage=Usage(100, 10, 40), seconds=0.5)


class AskAgain:
    """A model call after the answer (as a tool loop makes): it offers its tool, and is counted."""

    tools = (LOOKUP,)

    def __init__(self, model: MeteredModel) -> None:
        self.model = model

    async def run(self, draft: TurnDraft) -> None:
        messages = need(draft.window, "window").messages
        completion = await self.model.chat(messages, tools=draft.offered(), chat_id=draft.request.chat_id)
        draft.count(completion)
        draft.completion = completion


async def test_a_steps_tools_are_offered_and_every_model_call_counted(counter: TokenCounter) -> None:
    model = MeteredModel()
    service = build(model, store(), counter, static=False, notes=False, after_answer=[AskAgain(model)])
    model.replies.extend(["first", "second"])
    result = await service.handle(1, "Where is my refund?", deliver=noop)
    assert [[t["function"]["name"] for t in chat["tools"]] for chat in model.chats] == [
        ["handoff_to_operator", "lookup_order"]
    ] * 2
    assert result.reply == "second"
    assert result.usage == Usage(200, 20, 80) and result.llm_seconds == 1.0


async def test_a_side_effect_kept_on_the_request_is_not_repeated_by_a_retry(counter: TokenCounter) -> None:
    """A concurrent update at Commit runs every step again; a step's outside effect made with ``once``
    is made on the first attempt only, and the retry reuses its result."""
    sessions = store()
    writes: list[int] = []

    class Write:
        async def run(self, draft: TurnDraft) -> None:
            async def act() -> int:
                writes.append(draft.attempt)
                return len(writes)

            receipt = await once(draft, "write", act)
            completion = need(draft.completion, "completion")
            draft.completion = replace(completion, text=f"{completion.text} (receipt {receipt})")

    async def interfere() -> str:
        await sessions.reset(1)
        return "first attempt, lost"

    model = RecordingModel()
    service = build(model, sessions, counter, static=False, notes=False, after_answer=[Write()])
    model.replies.extend([interfere, "second attempt"])
    result = await service.handle(1, "Cancel my order", deliver=noop)
    assert result.attempts == 2 and len(model.chats) == 2
    assert writes == [1], "the write was made once, on the first attempt"
    assert result.reply == "second attempt (receipt 1)"


async def test_a_step_before_the_one_it_needs_fails_loudly(counter: TokenCounter) -> None:
    model = RecordingModel()
    service = build(model, store(), counter, static=False, notes=False)
    fit, answer, reply, commit = (
        next(s for s in service.steps if isinstance(s, kind)) for kind in (FitWindow, Answer, Reply, Commit)
    )
    service.steps = (fit, reply, answer, commit)
    with pytest.raises(AssertionError, match="completion is read before the step that makes it"):
        await service.handle(1, "hello", deliver=noop)
    assert model.chats == [], "nothing reached the model"
