"""Intake: an update is queued, offered again while queueing fails for no known reason, and only an
update that keeps failing (or cannot be encoded) goes to the dead letters."""

from __future__ import annotations

import fakeredis
import pytest

from bot.runtime.intake import UNEXPECTED_FAILURES_KEPT, Intake, IntakeError
from services.backends.redis.deadletters import DeadLetterStore
from services.backends.redis.keys import KeySpace
from services.backends.redis.queue import ChatWorkQueue

KEYS = KeySpace("i", "1")


class BrokenQueue(ChatWorkQueue):
    async def enqueue(self, chat_id: int, item_id: str, payload: str, *, order: int) -> bool:
        raise RuntimeError("something nobody foresaw")


def update(update_id: int, text: str = "hi") -> dict[str, object]:
    return {
        "update_id": update_id,
        "message": {"message_id": 1, "date": 0, "chat": {"id": 5, "type": "private"}, "text": text},
    }


async def test_an_unexpected_failure_is_retried_before_it_is_dead_lettered() -> None:
    redis = fakeredis.FakeAsyncRedis()
    dead = DeadLetterStore(redis=redis, keys=KEYS)
    intake = Intake(queue=BrokenQueue(redis=redis, keys=KEYS), dead_letters=dead, identity="w")
    for _ in range(UNEXPECTED_FAILURES_KEPT - 1):
        with pytest.raises(IntakeError):  # webhook: 503, polling: the offset does not move
            await intake.take(update(7))
        assert await dead.count() == 0
    await intake.take(update(7))
    assert [letter.item_id for letter in await dead.list()] == ["u7"]


async def test_a_lone_surrogate_is_queued_as_ascii_json() -> None:
    redis = fakeredis.FakeAsyncRedis()
    intake = Intake(
        queue=ChatWorkQueue(redis=redis, keys=KEYS), dead_letters=DeadLetterStore(redis=redis), identity="w"
    )
    await intake.take(update(8, "broken \ud800 text"))
    [member] = await redis.zrange(KEYS.chat(5).inbox, 0, -1)
    assert b"\\\\ud800" in member
