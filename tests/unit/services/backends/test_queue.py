"""The per-chat work queue, over every shared backend (the ``queued_backend`` fixture)."""

from __future__ import annotations

import asyncio
import time

import fakeredis
import pytest
import redis
from redis.asyncio import Redis

from services.backends.redis.queue import RedisWorkQueue
from services.core.errors import StoreUnavailableError
from services.core.fence import Fence
from services.core.records import NewMessage
from services.ports.backend import QueuedBackend
from services.ports.queue import FINISHED, TOLD, Claim, Step, WorkQueue
from tests.conftest import TEST_KEYS


@pytest.fixture
def queue(queued_backend: QueuedBackend) -> WorkQueue:
    # a lease no busy machine outlasts between two steps; it runs out when the test says (lease_runs_out)
    return queued_backend.queue(lease_ms=LONG_LEASE_MS)


KEYS = TEST_KEYS
LONG_LEASE_MS = 60_000


async def watchdog_comes_due(queue: WorkQueue, claim: Claim) -> None:
    """What the lease's time passing does to the ready set: the watchdog ``claim`` set, if it is still
    there, is due now (its score moves to the past, and ``claim`` remembers the moved score, as it
    would remember the one that lapsed)."""
    assert isinstance(queue, RedisWorkQueue)
    if await queue._redis.zscore(KEYS.ready, str(claim.chat_id)) == claim.watchdog:
        await queue._redis.zadd(KEYS.ready, {str(claim.chat_id): 1})
        claim.watchdog = 1


async def lease_runs_out(queue: WorkQueue, claim: Claim) -> None:
    """``claim``'s lease runs out now, as after its time in Redis: the lease key expires (waited for on
    the condition, not a clock) and its watchdog is due. The leases are long so that a busy machine
    cannot end one between a test's steps."""
    assert isinstance(queue, RedisWorkQueue)
    lease = KEYS.chat(claim.chat_id).lease
    await queue._redis.pexpire(lease, 1)
    for _ in range(500):
        if not await queue._redis.exists(lease):
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the lease did not expire")
    await watchdog_comes_due(queue, claim)


async def take(queue: WorkQueue, token: str) -> tuple[Claim, Step] | None:
    """Claim the first due chat and take its lease; None if nothing is due or it is held."""
    claim = await queue.claim(token)
    if claim is None:
        return None
    step = await queue.next(claim, acquire=True)
    return None if step.kind == "busy" else (claim, step)


async def drain(queue: WorkQueue, token: str) -> list[tuple[int, str]]:
    done: list[tuple[int, str]] = []
    while (taken := await take(queue, token)) is not None:
        claim, step = taken
        while step.kind == "item":
            assert step.item is not None
            done.append((claim.chat_id, step.item.payload))
            step = await queue.next(claim, done=step.item)
        assert step.kind == "released"
    return done


async def test_items_come_out_per_chat_in_order_once(queue: WorkQueue) -> None:
    for n in (2, 0, 1):  # taken in out of order: they come out by their order key
        assert await queue.enqueue(1, f"u{n}", f"a{n}", order=n)
        assert await queue.enqueue(2, f"v{n}", f"b{n}", order=n)
    assert not await queue.enqueue(1, "u1", "a1-again", order=1)
    done = await drain(queue, "w1")
    assert [p for c, p in done if c == 1] == ["a0", "a1", "a2"]
    assert [p for c, p in done if c == 2] == ["b0", "b1", "b2"]
    assert await queue.claim("w1") is None


async def test_a_held_chat_is_not_served_twice(queue: WorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    first = await take(queue, "w1")
    assert first is not None
    await queue.enqueue(1, "u2", "b", order=2)  # makes the chat due again while w1 holds it
    assert await take(queue, "w2") is None
    claim, step = first
    assert step.item is not None and step.item.payload == "a"
    step = await queue.next(claim, done=step.item)  # new work arrived: w1 keeps the chat
    assert step.kind == "item" and step.item is not None and step.item.payload == "b"


async def test_next_acknowledges_exactly_the_item_processed(queue: WorkQueue) -> None:
    await queue.enqueue(1, "u12", "a", order=12)
    taken = await take(queue, "w1")
    assert taken is not None
    claim, step = taken
    assert step.item is not None
    await queue.enqueue(1, "u5", "late", order=5)  # an older update taken in late becomes the head
    step = await queue.next(claim, done=step.item)
    assert step.item is not None and step.item.payload == "late"
    step = await queue.next(claim, done=step.item)
    assert step.kind == "released", "u12 was acknowledged although it was no longer the head"


async def test_attempts_are_counted_across_workers(queue: WorkQueue, queued_backend: QueuedBackend) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    taken = await take(queue, "w1")
    assert taken is not None and taken[1].item is not None
    assert taken[1].item.started == 1 and taken[1].item.vanished_attempts == 0
    await lease_runs_out(queue, taken[0])  # w1 died mid-item
    heir = await take(queue, "w2")
    assert heir is not None and heir[1].item is not None
    assert heir[1].item.started == 2 and heir[1].item.vanished_attempts == 1
    await queue.note(heir[0], heir[1].item, "transient")
    again = await queue.next(heir[0])
    assert again.item is not None and again.item.transient_failures == 1 and again.item.vanished_attempts == 1
    await queue.note(heir[0], again.item, "failed")
    third = await queue.next(heir[0])
    assert third.item is not None
    await queue.note(heir[0], third.item, "set_aside")  # handed back unfinished on shutdown: no failure
    last = await queue.next(heir[0])
    assert last.item is not None and last.item.started == 5
    assert last.item.failures == 1 and last.item.vanished_attempts == 1


async def test_dead_worker_is_taken_over_after_the_lease(queue: WorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    dead = await take(queue, "w1")
    assert dead is not None
    assert await take(queue, "w2") is None
    await lease_runs_out(queue, dead[0])
    heir = await take(queue, "w2")
    assert heir is not None and heir[0].chat_id == 1
    assert heir[1].item is not None and heir[1].item.payload == "a"
    assert (await queue.next(dead[0], done=dead[1].item)).kind == "lost", "the dead worker's lease is gone"
    assert (await queue.next(heir[0], done=heir[1].item)).kind == "released"


async def test_lost_lease_leaves_the_chat_due(queue: WorkQueue) -> None:
    """Regression: a release by a worker whose lease lapsed dropped the chat's watchdog, so a message
    that arrived meanwhile sat in the inbox with no lease and nothing making the chat due."""
    await queue.enqueue(1, "u1", "a", order=1)
    first = await take(queue, "w1")
    assert first is not None
    await lease_runs_out(queue, first[0])  # w1 paused past its lease
    await queue.enqueue(1, "u2", "b", order=2)
    step = await queue.next(first[0], done=first[1].item)
    assert step.kind == "lost"
    heir = await take(queue, "w2")
    assert heir is not None, "the chat with work in its inbox must stay due"
    assert heir[1].item is not None and heir[1].item.payload == "a"


async def test_renew_keeps_a_slow_item(queue: WorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    taken = await take(queue, "w1")
    assert taken is not None
    for _ in range(4):
        await asyncio.sleep(0.12)
        assert await queue.renew(taken[0])
    assert await take(queue, "w2") is None


async def test_hand_back_makes_the_chat_available_at_once(queue: WorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    taken = await take(queue, "w1")
    assert taken is not None
    await queue.hand_back(taken[0])
    assert await take(queue, "w2") is not None


async def test_release_drops_the_watchdog_but_not_new_work(queue: WorkQueue) -> None:
    await queue.enqueue(1, "u1", "a", order=1)
    taken = await take(queue, "w1")
    assert taken is not None
    assert (await queue.next(taken[0], done=taken[1].item)).kind == "released"
    await watchdog_comes_due(queue, taken[0])  # the lease's time passes
    assert await queue.claim("w2") is None  # nothing due: the watchdog was dropped
    await queue.enqueue(1, "u2", "b", order=2)
    assert await take(queue, "w2") is not None


async def test_the_inbox_never_expires_while_it_holds_work(redis_server: object) -> None:
    """Regression: the inbox had the session TTL, refreshed only on enqueue, so an update Telegram had
    been told we have could expire before a worker claimed it."""
    client = Redis.from_url(redis_server.url)  # type: ignore[attr-defined]
    await client.flushdb()
    queue = RedisWorkQueue(redis=client, keys=KEYS, lease_ms=1000, ttl_seconds=1)
    await queue.enqueue(1, "u1", "a", order=1)
    assert await client.ttl(KEYS.chat(1).inbox) == -1
    assert await client.ttl(KEYS.chat(1).seen) > 0
    await client.aclose()


async def test_stats_report_depth_and_age(queue: WorkQueue) -> None:
    assert await queue.stats() == (0, 0)
    await queue.enqueue(1, "u1", "a", order=1)
    await queue.enqueue(2, "u1", "a", order=1)
    await asyncio.sleep(0.05)
    depth, age = await queue.stats()
    assert depth == 2 and age >= 0.04


async def test_a_release_delayed_past_its_watchdog_leaves_new_work_due(queued_backend: QueuedBackend) -> None:
    """A worker paused between releasing a chat and dropping its watchdog must not drop the ready entry
    a message arriving meanwhile relies on (its ZADD LT cannot move an earlier score). Redis scripts
    driven step by step: the Redis queue's own test. The lease outlasts the steps (with 300 ms, a
    loaded machine let it expire before the release, which then read as lease lost)."""
    queue = queued_backend.queue(lease_ms=30_000)
    assert isinstance(queue, RedisWorkQueue)
    await queue.enqueue(1, "u1", "a", order=1)
    taken = await take(queue, "w1")
    assert taken is not None
    claim = taken[0]
    await queue._redis.zadd(KEYS.ready, {"1": 1})  # the watchdog passed long ago (paused worker) ...
    claim.watchdog = 1
    await queue.enqueue(1, "u2", "b", order=2)  # ... and new work came in meanwhile
    released = await queue._next(
        keys=[KEYS.chat(1).lease, KEYS.chat(1).inbox, KEYS.chat(1).attempts],
        args=[claim.token, queue.lease_ms, "0", "", ""],
    )
    assert released[0] == 1  # (u1 still there: w1 did not get to release before the pause)
    await queue._drop_watchdog(keys=[KEYS.ready], args=["1", claim.watchdog])
    assert await queue._redis.zscore(KEYS.ready, "1") is not None, "the chat with new work must stay due"


async def test_the_acknowledgement_writes_the_reply_marks_it_carries(queued_backend: QueuedBackend) -> None:
    """A worker leaves an answered turn's reply mark to the acknowledgement of its update (one script
    instead of two): after the ack the turn reads as answered, so it is never sent again."""
    queue, store = queued_backend.queue(lease_ms=5000), queued_backend.store
    await queue.enqueue(1, "u1", "a", order=1)
    taken = await take(queue, "w1")
    assert taken is not None and taken[1].item is not None
    fence = Fence("w1", valid_until=time.monotonic() + 5)
    await store.commit_turn(1, expected_version=0, messages=[NewMessage("user", "a", 1)], turn_id="u1", fence=fence)
    assert not (await store.turn_status(1, "u1")).replied
    assert (await queue.next(taken[0], done=taken[1].item, replied=("u1",))).kind == "released"
    assert (await store.turn_status(1, "u1")).replied


async def test_a_failed_attempt_keeps_its_reply_marks_too(queued_backend: QueuedBackend) -> None:
    queue, store = queued_backend.queue(lease_ms=5000), queued_backend.store
    await queue.enqueue(1, "u1", "a", order=1)
    taken = await take(queue, "w1")
    assert taken is not None and taken[1].item is not None
    await queue.note(taken[0], taken[1].item, "failed", replied=("u1",))
    assert (await store.turn_status(1, "u1")).replied


async def test_reply_marks_are_fenced_like_the_acknowledgement(queued_backend: QueuedBackend) -> None:
    queue, store = queued_backend.queue(lease_ms=LONG_LEASE_MS), queued_backend.store
    await queue.enqueue(1, "u1", "a", order=1)
    stale = await take(queue, "w1")
    assert stale is not None and stale[1].item is not None
    await lease_runs_out(queue, stale[0])  # paused past its lease; another worker takes the chat
    assert await take(queue, "w2") is not None
    assert (await queue.next(stale[0], done=stale[1].item, replied=("u1",))).kind == "lost"
    await queue.note(stale[0], stale[1].item, "failed", replied=("u1",))
    assert not (await store.turn_status(1, "u1")).replied, "a worker without the lease marked a reply"


async def test_reply_marks_outlive_a_lapsed_lease_that_nobody_took(queued_backend: QueuedBackend) -> None:
    """Issue 36: Redis stalled past the lease after the reply went out, before the acknowledgement
    carrying its mark. Nobody else took the chat: the item is not acknowledged (the next holder takes
    it again) but the mark is written, so the next holder finds the turn answered and sends nothing."""
    queue, store = queued_backend.queue(lease_ms=LONG_LEASE_MS), queued_backend.store
    await queue.enqueue(1, "u1", "a", order=1)
    await queue.enqueue(1, "u2", "b", order=2)
    stalled = await take(queue, "w1")
    assert stalled is not None and stalled[1].item is not None
    await lease_runs_out(queue, stalled[0])
    assert (await queue.next(stalled[0], done=stalled[1].item, replied=("u1",))).kind == "lost"
    assert (await store.turn_status(1, "u1")).replied, "the sender's own record was refused"
    await queue.note(stalled[0], stalled[1].item, "failed", replied=("u2",))
    assert (await store.turn_status(1, "u2")).replied
    heir = await take(queue, "w2")
    assert heir is not None and heir[1].item is not None
    assert heir[1].item.id == "u1", "nothing was acknowledged without the lease"
    assert heir[1].item.failures == 0, "no attempt was recorded without the lease"


async def test_a_give_up_stage_outlives_a_lapsed_lease_that_nobody_took(queued_backend: QueuedBackend) -> None:
    """Like a reply mark, how far giving an update up got records what was done (the customer told):
    kept after the writer's lease lapsed while nobody took the chat, refused once another worker has."""
    queue = queued_backend.queue(lease_ms=LONG_LEASE_MS)
    await queue.enqueue(1, "u1", "a", order=1)
    stalled = await take(queue, "w1")
    assert stalled is not None and stalled[1].item is not None
    await lease_runs_out(queue, stalled[0])
    await queue.given_up(stalled[0], stalled[1].item, TOLD)
    heir = await take(queue, "w2")
    assert heir is not None and heir[1].item is not None and heir[1].item.given_up == TOLD
    await queue.given_up(stalled[0], stalled[1].item, FINISHED)  # w2 holds the chat now: refused
    await queue.hand_back(heir[0])
    third = await take(queue, "w3")
    assert third is not None and third[1].item is not None and third[1].item.given_up == TOLD


async def test_a_claim_says_whether_other_chats_are_due(queue: WorkQueue) -> None:
    """So that a worker whose claim was the last due chat waits for a wake-up instead of asking again."""
    await queue.enqueue(1, "u1", "a", order=1)
    await queue.enqueue(2, "u2", "b", order=2)
    first = await queue.claim("w1")
    assert first is not None and first.others_due
    second = await queue.claim("w1")
    assert second is not None and not second.others_due
    assert await queue.claim("w1") is None


async def test_enqueue_and_take_hands_a_free_chat_to_the_caller(queue: WorkQueue) -> None:
    """The webhook worker that receives an update serves its chat when nobody holds it: the item and the
    chat's lease in one step, and a watchdog in place of the ready entry."""
    taken = await queue.enqueue_and_take(1, "u1", "a", order=1, token="w1")
    assert taken.new and taken.claim is not None and taken.step is not None
    assert taken.step.item is not None and taken.step.item.payload == "a" and taken.step.item.started == 1
    assert await take(queue, "w2") is None, "nobody else may take it while its watchdog runs"
    held = await queue.enqueue_and_take(1, "u2", "b", order=2, token="w2")
    assert held.new and held.claim is None, "a held chat is only queued (and marked due)"
    assert await take(queue, "w2") is None, "due, but its lease is held: busy"
    step = await queue.next(taken.claim, done=taken.step.item)
    assert step.item is not None and step.item.payload == "b", "the holder serves what arrived meanwhile"
    assert (await queue.next(taken.claim, done=step.item)).kind == "released"
    again = await queue.enqueue_and_take(1, "u1", "a", order=1, token="w3")
    assert not again.new and again.claim is None, "a redelivery of a processed update serves nothing"
    fresh = await queue.enqueue_and_take(1, "u3", "c", order=3, token="w3")
    assert fresh.claim is not None, "the redelivery left the chat free"


async def test_a_chat_whose_watchdog_cannot_be_written_is_neither_taken_nor_counted() -> None:
    """On a cluster the ready set's master may be down while the chat's is up: the watchdog is written
    first, so the failure leaves no lease held without one and counts no attempt (intake answers 503 and
    Telegram offers the update again)."""
    queue = RedisWorkQueue(redis=fakeredis.FakeAsyncRedis(), keys=KEYS, lease_ms=5000)
    watch = queue._watch

    async def ready_set_down(**_: object) -> object:
        raise redis.ConnectionError("the ready set's master is down")

    queue._watch = ready_set_down  # type: ignore[assignment,method-assign]
    with pytest.raises(StoreUnavailableError):
        await queue.enqueue_and_take(1, "u1", "a", order=1, token="w1")
    queue._watch = watch  # type: ignore[method-assign]
    offered_again = await queue.enqueue_and_take(1, "u1", "a", order=1, token="w2")
    assert offered_again.step is not None and offered_again.step.item is not None
    assert offered_again.step.item.payload == "a" and offered_again.step.item.started == 1


async def test_an_attempt_set_aside_after_its_transient_note_is_counted_once() -> None:
    """A shutdown during the back-off after a transient failure sets the same attempt aside: one attempt,
    one count (two counts would bring its give-up time and the dead letters closer)."""
    queue = RedisWorkQueue(redis=fakeredis.FakeAsyncRedis(), keys=KEYS, lease_ms=5000)
    await queue.enqueue(8, "u8", "{}", order=1)
    claim = await queue.claim("w:1")
    assert claim is not None
    step = await queue.next(claim, acquire=True)
    assert step.item is not None
    await queue.note(claim, step.item, "transient")
    await queue.note(claim, step.item, "set_aside")
    again = await queue.next(claim)
    assert again.item is not None
    assert (again.item.started, again.item.transient_failures, again.item.vanished_attempts) == (2, 1, 0)
