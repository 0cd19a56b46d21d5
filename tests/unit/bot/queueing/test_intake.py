"""Intake: an update is queued, offered again while queueing fails for no known reason, and only an
update that keeps failing (or cannot be encoded) goes to the dead letters."""

from __future__ import annotations

import fakeredis
import pytest

from bot.queueing.intake import UNEXPECTED_FAILURES_KEPT, Intake, IntakeError
from services.backends.redis.deadletters import RedisDeadLetters
from services.backends.redis.keys import KeySpace
from services.backends.redis.queue import RedisWorkQueue

KEYS = KeySpace("i", "1")


class BrokenQueue(RedisWorkQueue):
    async def enqueue(self, chat_id: int, item_id: str, payload: str, *, order: int) -> bool:
        raise RuntimeError("something nobody foresaw")


def update(update_id: int, text: str = "hi") -> dict[str, object]:
    return {
        "update_id": update_id,
        "message": {"message_id": 1, "date": 0, "chat": {"id": 5, "type": "private"}, "text": text},
    }


async def test_an_unexpected_failure_is_retried_before_it_is_dead_lettered() -> None:
    redis = fakeredis.FakeAsyncRedis()
    dead = RedisDeadLetters(redis=redis, keys=KEYS)
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
        queue=RedisWorkQueue(redis=redis, keys=KEYS), dead_letters=RedisDeadLetters(redis=redis), identity="w"
    )
    await intake.take(update(8, "broken \ud800 text"))
    [member] = await redis.zrange(KEYS.chat(5).inbox, 0, -1)
    assert b"\\\\ud800" in member


async def test_operator_group_updates_go_to_the_inbox_of_their_topics_customer() -> None:
    from bot.queueing.intake import operator_route
    from services.backends.redis.handoffs import RedisHandoffStore

    group, customer = -100777, 5
    redis = fakeredis.FakeAsyncRedis()
    handoffs = RedisHandoffStore(redis=redis, keys=KEYS)
    await handoffs.bind_topic(group, 42, customer)
    intake = Intake(
        queue=RedisWorkQueue(redis=redis, keys=KEYS),
        dead_letters=RedisDeadLetters(redis=redis, keys=KEYS),
        identity="w",
        route=operator_route(group, handoffs),
    )

    def in_group(update_id: int, thread: int | None, *, topic: bool = True) -> dict[str, object]:
        message: dict[str, object] = {
            "message_id": update_id,
            "date": 0,
            "chat": {"id": group, "type": "supergroup", "is_forum": True},
            "text": "operator says",
        }
        if thread is not None:
            message["message_thread_id"] = thread
            message["is_topic_message"] = topic
        return {"update_id": update_id, "message": message}

    await intake.take(in_group(10, 42))  # the customer's topic
    await intake.take(in_group(11, 43))  # a topic no handoff opened: dropped
    await intake.take(in_group(12, None))  # the group's general chat: dropped
    await intake.take(in_group(15, 42, topic=False))  # a reply thread in the general chat, not a topic
    await intake.take({"update_id": 13, "edited_message": in_group(13, 42)["message"]})  # edits: dropped
    await intake.take(update(14))  # a customer's own message stays with its chat
    inbox = await redis.zrange(KEYS.chat(customer).inbox, 0, -1)
    assert len(inbox) == 2 and b"operator says" in inbox[0] and b"u10" in inbox[0] and b"u14" in inbox[1]
    assert await redis.zcard(KEYS.chat(group).inbox) == 0
