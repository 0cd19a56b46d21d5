"""The turn as steps (services.engine.turn_steps): listed once, in order; one more step is one more
entry that sees what the steps before it wrote; a step run before the one it needs fails loudly."""

from __future__ import annotations

import fakeredis
import pytest

from services.backends.redis.keys import KeySpace
from services.backends.redis.store import RedisSessionStore
from services.core.tokens import TokenCounter
from services.engine.turn_steps import Answer, Commit, FitWindow, Reply, TurnDraft, need
from tests.unit.services.engine.test_prompts_recorded import RecordingModel, build


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
    service = build(model, store(), counter, static=False, notes=False)
    at = names(service.steps).index("Reply")
    service.steps = (*service.steps[:at], Shout(), *service.steps[at:])
    model.replies.append("thanks, that is all")
    result = await service.handle(1, "Where is my refund?", deliver=noop)
    assert seen == [(3, "thanks, that is all")]  # the instruction, the knowledge, the new message
    assert result.reply == "THANKS, THAT IS ALL" and result.stored_messages == 2


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
