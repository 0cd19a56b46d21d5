"""What every backend promises besides the store contract (test_store_contract.py): the rate
limit rule, /forget deleting every record of a chat, the readiness ping. Runs over every backend
through the one ``backend`` fixture (tests/conftest.py)."""

from __future__ import annotations

from services.backends.memory import InMemoryKnowledgeGaps
from services.backends.redis.backend import RedisBackend
from services.backends.redis.gaps import RedisKnowledgeGaps
from services.core.errors import ConcurrentUpdateError
from services.core.records import NewMessage
from services.knowledge.gaps import GAPS_KEPT
from services.ports.backend import Backend, QueuedBackend
from services.ports.knowledge import KnowledgeGaps
from tests.e2e.waiting import eventually


def turn(n: int) -> list[NewMessage]:
    return [NewMessage("user", f"question {n}", 10), NewMessage("assistant", f"answer {n}", 20)]


async def test_ping_answers(backend: Backend) -> None:
    await backend.ping()


async def test_rate_limit_refuses_after_the_limit_and_notifies_once(backend: Backend) -> None:
    decisions = [await backend.limiter.hit(1, key=f"u{n}") for n in range(4)]
    assert [d.allowed for d in decisions] == [True, True, False, False]
    assert [d.notify for d in decisions] == [False, False, True, False]
    assert 0 < decisions[2].retry_after <= 60
    assert (await backend.limiter.hit(2)).allowed, "chats are independent"


async def test_a_retried_update_is_never_refused_for_its_own_earlier_attempt(backend: Backend) -> None:
    assert (await backend.limiter.hit(1, key="u1")).allowed
    assert (await backend.limiter.hit(1, key="u2")).allowed
    assert (await backend.limiter.hit(1, key="u1")).allowed, "the same update counted once"
    assert not (await backend.limiter.hit(1, key="u3")).allowed


async def test_forget_chat_deletes_the_conversation_but_not_the_rate_window(backend: Backend) -> None:
    await backend.store.commit_turn(1, expected_version=0, messages=turn(0), turn_id="u1")
    await backend.store.commit_turn(2, expected_version=0, messages=turn(0))
    for n in range(3):
        await backend.limiter.hit(1, key=f"u{n}")
    loaded = await backend.store.load(1)
    await backend.forget_chat(1)
    after = await backend.store.load(1)
    assert after.messages == () and after.summary is None and after.version > loaded.version
    assert not (await backend.store.turn_status(1, "u1")).committed
    assert not (await backend.limiter.hit(1, key="u9")).allowed, "/forget is no way around the rate limit"
    assert len((await backend.store.load(2)).messages) == 2, "other chats stay"


async def test_forget_chat_fences_a_turn_loaded_before_it(backend: Backend) -> None:
    loaded = await backend.store.load(1)
    await backend.forget_chat(1)
    try:
        await backend.store.commit_turn(1, expected_version=loaded.version, messages=turn(0))
    except ConcurrentUpdateError:
        pass
    else:
        raise AssertionError("a turn loaded before /forget was committed after it")
    assert (await backend.store.load(1)).messages == ()


async def test_forget_chat_drops_the_chats_dead_letters(queued_backend: QueuedBackend) -> None:
    for chat_id in (1, 2):
        await queued_backend.dead_letters.add(
            chat_id=chat_id, item_id="u9", order=9, payload='{"secret": "7718"}', error="boom", attempts=3, worker="w"
        )
    await queued_backend.forget_chat(1)
    assert [letter.chat_id for letter in await queued_backend.dead_letters.list()] == [2]


async def test_knowledge_gaps_count_questions_and_forget_takes_a_chats_back(backend: Backend) -> None:
    for chat_id, question in [
        (1, "Do you sell gift cards?"),
        (2, "do you sell   GIFT cards?"),
        (1, "Do you ship to Mars?"),
    ]:
        await backend.gaps.record(chat_id, question)
    await backend.gaps.record(2, "Do you sell gift cards?")
    for small_talk in ("Thanks!", "hello", "ok, and how?", "Спасибо!"):
        await backend.gaps.record(2, small_talk)  # asks about nothing: no gap
    assert await backend.gaps.top(10) == [("do you sell gift cards?", 3), ("do you ship to mars?", 1)]
    await backend.forget_chat(1)
    assert await backend.gaps.top(10) == [("do you sell gift cards?", 2)], "nothing chat 1 asked stays"
    await backend.forget_chat(1)  # idempotent
    assert await backend.gaps.top(1) == [("do you sell gift cards?", 2)]


class Clock:
    """The in-process backend's time source, moved by the test (Redis keeps its own clock)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gaps_with_ttl(backend: Backend, ttl: float, clock: Clock) -> KnowledgeGaps:
    """The backend's gap records with a short SESSION_TTL_SECONDS (the fixture's is an hour)."""
    if isinstance(backend, RedisBackend):
        return RedisKnowledgeGaps(redis=backend.redis, keys=backend.keys, ttl_seconds=ttl)
    return InMemoryKnowledgeGaps(ttl_seconds=ttl, clock=clock)


async def test_a_gap_count_expires_a_session_ttl_after_the_question_was_last_asked(backend: Backend) -> None:
    """Regression: the shared counts kept each question forever while the chat's record (what /forget
    uses) expired, so a question could outlive every way of forgetting it."""
    clock = Clock()
    gaps = gaps_with_ttl(backend, 1, clock)
    await gaps.record(1, "Do you ship to Mars?")
    await gaps.record(2, "Do you sell gift cards?")
    assert dict(await gaps.top(10)) == {"do you ship to mars?": 1, "do you sell gift cards?": 1}
    asked = 1

    async def mars_expired() -> bool:
        nonlocal asked
        clock.now += 0.1
        await gaps.record(2, "do you sell gift cards?")  # asked again and again: stays
        asked += 1
        return "do you ship to mars?" not in dict(await gaps.top(10))

    await eventually(mars_expired, within=10, what="the question not asked for a TTL to expire")
    assert await gaps.top(10) == [("do you sell gift cards?", asked)]
    await gaps.forget(2)
    assert await gaps.top(10) == []
    await gaps.record(1, "Do you ship to Mars?")
    assert await gaps.top(10) == [("do you ship to mars?", 1)], "counted anew, not on top of the expired count"


async def test_gap_records_without_a_ttl_never_expire(backend: Backend) -> None:
    clock = Clock()
    gaps = gaps_with_ttl(backend, 0, clock)
    await gaps.record(1, "Do you ship to Mars?")
    clock.now += 10 * 365 * 86400
    assert await gaps.top(10) == [("do you ship to mars?", 1)]


async def test_the_last_asked_times_are_capped_with_the_counts(queued_backend: QueuedBackend) -> None:
    assert isinstance(queued_backend, RedisBackend)
    for n in range(GAPS_KEPT + 5):
        await queued_backend.gaps.record(1, f"question {n}")
    await queued_backend.gaps.record(1, "question 7")
    counts = await queued_backend.redis.zcard(queued_backend.keys.knowledge_gaps)
    asked = await queued_backend.redis.zcard(queued_backend.keys.knowledge_gaps_asked)
    assert counts == asked == GAPS_KEPT
    await queued_backend.forget_chat(1)
    assert await queued_backend.redis.zcard(queued_backend.keys.knowledge_gaps_asked) == 0
