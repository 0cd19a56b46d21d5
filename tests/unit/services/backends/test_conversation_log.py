"""The conversation log contract (docs/quality.md) over every backend (memory, fakeredis, redis-server,
Redis Cluster): when a conversation starts, when its feedback question is due, and that exactly one worker
asks it, also when three claim it at once and one dies after claiming."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.backends.redis.backend import RedisBackend
from services.core.errors import LeaseLostError
from services.core.fence import Fence
from services.core.quality import Figures
from services.ports.backend import Backend
from services.ports.quality import ConversationLog

CHAT = 4242
SOON = 0.05
"""FEEDBACK_AFTER_SECONDS of these tests."""


@pytest.fixture
def log(backend: Backend) -> ConversationLog:
    return backend.conversations


async def message(log: ConversationLog, chat: int = CHAT, *, private: bool = True, gap: float = 3600) -> bool:
    return (await log.customer_message(chat, private=private, language="ru", gap_seconds=gap)).new


async def due_soon(log: ConversationLog, within: float = 5.0) -> list[tuple[int, int]]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if due := await log.due():
            return due
        await asyncio.sleep(0.02)
    return []


async def test_a_conversation_starts_after_a_quiet_gap_or_new(log: ConversationLog) -> None:
    assert await message(log)
    assert not await message(log), "within the gap: the same conversation"
    await asyncio.sleep(0.03)
    assert await message(log, gap=0.01), "after the gap: a new one"
    await log.ended(CHAT)
    assert await message(log), "after /new: a new one"
    records = await log.conversations(0)
    assert [r.messages for r in records] == [2, 1, 1]


async def test_the_question_is_due_after_the_answer_and_a_message_moves_it(log: ConversationLog) -> None:
    await message(log)
    assert await log.begin_ask(CHAT) is None, "a reply is pending: never asked"
    first = await log.answered(CHAT, ask_after_seconds=3600)
    assert first is not None and first >= 0
    assert await log.due() == [], "not due for an hour"
    assert await log.answered(CHAT, ask_after_seconds=SOON) is None, "the first answer is counted once"
    assert [chat for chat, _ in await due_soon(log)] == [CHAT]
    await message(log)  # the customer wrote again first: the quiet period starts over
    assert await log.due() == []
    assert await log.begin_ask(CHAT) is None, "its reply is pending"
    await log.answered(CHAT, ask_after_seconds=SOON)
    await due_soon(log)
    ask = await log.begin_ask(CHAT)
    assert ask is not None and ask.language == "ru" and not ask.again
    assert await log.asked(CHAT, ask.conversation)
    assert not await log.asked(CHAT, ask.conversation), "marked once"
    await message(log)
    await log.answered(CHAT, ask_after_seconds=SOON)
    await asyncio.sleep(SOON * 2)
    assert await log.due() == [] and await log.begin_ask(CHAT) is None, "never twice in one conversation"


async def test_never_during_a_handoff_nor_in_groups_and_after_a_handoff_at_once(log: ConversationLog) -> None:
    await message(log, -100500, private=False)
    await log.answered(-100500, ask_after_seconds=SOON)
    await message(log)
    await log.answered(CHAT, ask_after_seconds=SOON)
    assert await log.handoff_opened(CHAT, private=True) == (True, False)
    assert await log.handoff_opened(CHAT, private=True) == (False, False), "handed off once per conversation"
    assert await log.handoff_opened(99, private=True) == (True, True), "/operator first: a conversation starts"
    await log.answered(CHAT, ask_after_seconds=SOON)
    await asyncio.sleep(SOON * 2)
    assert await log.due() == [], "not while the handoff is open, never in a group"
    assert await log.begin_ask(CHAT) is None
    await log.handoff_ended(CHAT, ask=True)
    assert [chat for chat, _ in await due_soon(log)] == [CHAT]
    assert await log.begin_ask(CHAT) is not None
    (record,) = [r for r in await log.conversations(0) if r.chat_id == CHAT]
    assert record.handed_off and not record.resolved
    assert [r.chat_id for r in await log.conversations(0) if r.messages == 0] == [99], "indexed for the report"


async def test_three_claimers_and_one_that_dies_still_ask_exactly_once(log: ConversationLog) -> None:
    """A claimer that dies after claiming (before queueing) holds the chat until its hold expires; then
    another queues it. Every queued item is served under the chat's lease, one after the other: the
    first asks, the others find it asked."""
    await message(log)
    await log.answered(CHAT, ask_after_seconds=SOON)
    ((chat, due_ms),) = await due_soon(log)
    claims = await asyncio.gather(*(log.claim(chat, due_ms, hold_seconds=0.3) for _ in range(3)))
    assert sum(c is not None for c in claims) == 1, claims
    # the winner dies here: nothing queued, nothing released
    assert await log.due() == [], "held"
    queued = []
    (chat, held_ms), *_ = await due_soon(log)
    claims = await asyncio.gather(*(log.claim(chat, held_ms, hold_seconds=0.3) for _ in range(2)))
    (hold,) = [c for c in claims if c is not None]
    queued.append(held_ms)
    # this one queues, then dies before releasing: a third claim queues a second item
    (chat, held_again), *_ = await due_soon(log)
    hold = await log.claim(chat, held_again, hold_seconds=0.3)
    assert hold is not None
    queued.append(held_again)
    await log.release(chat, hold)
    assert await log.due() == []
    sent = 0
    for _ in queued:  # served in order under the lease
        ask = await log.begin_ask(CHAT)
        if ask is not None:
            sent += 1
            await log.asked(CHAT, ask.conversation)
    assert sent == 1


async def test_a_worker_that_died_while_asking_asks_again_counted(log: ConversationLog) -> None:
    await message(log)
    await log.answered(CHAT, ask_after_seconds=SOON)
    await due_soon(log)
    first = await log.begin_ask(CHAT)
    assert first is not None and not first.again
    again = await log.begin_ask(CHAT)  # the item redelivered: not known to be sent
    assert again is not None and again.again and again.conversation == first.conversation


async def test_a_press_counts_once_and_forget_takes_everything(log: ConversationLog) -> None:
    await message(log)
    await log.answered(CHAT, ask_after_seconds=SOON)
    await due_soon(log)
    ask = await log.begin_ask(CHAT)
    assert ask is not None and await log.asked(CHAT, ask.conversation)
    assert await log.rate(CHAT, ask.conversation, "no", item_id="u1") == "new"
    assert await log.rate(CHAT, ask.conversation, "no", item_id="u1") == "again", "the same press redelivered"
    assert await log.rate(CHAT, ask.conversation, "yes", item_id="u2") == "none", "a second press"
    figures = Figures.of(await log.conversations(0))
    assert (figures.conversations, figures.asked, figures.rated_no, figures.resolved) == (1, 1, 1, 0)
    await message(log, 7)
    await log.answered(7, ask_after_seconds=SOON)
    await log.forget(CHAT)
    assert [r.chat_id for r in await log.conversations(0)] == [7]
    assert await log.rate(CHAT, ask.conversation, "yes", item_id="u3") == "none"
    assert [chat for chat, _ in await due_soon(log)] == [7]
    await log.forget(7)
    assert await log.due() == [] and await log.conversations(0) == []


async def test_asking_needs_the_chat_lease(backend: Backend) -> None:
    if not isinstance(backend, RedisBackend):
        pytest.skip("one process has no leases")
    log = backend.conversations
    await message(log)
    await log.answered(CHAT, ask_after_seconds=SOON)
    await due_soon(log)
    await backend.redis.set(backend.keys.chat(CHAT).lease, "someone-else")
    with pytest.raises(LeaseLostError):
        await log.begin_ask(CHAT, fence=Fence("me", valid_until=time.monotonic() + 30))
    assert await log.begin_ask(CHAT, fence=Fence("someone-else", valid_until=time.monotonic() + 30)) is not None


async def test_a_handoff_end_that_was_not_recorded_does_not_silence_the_chat(log: ConversationLog) -> None:
    """The handoff store ended it, then recording the end failed (or the worker died): a new
    conversation (after the gap, or /new) clears the stale "handoff open"."""
    await message(log)
    await log.handoff_opened(CHAT, private=True)
    await log.ended(CHAT)  # later: /new (its own handoff_ended could fail the same way)
    await asyncio.sleep(0.03)
    assert await message(log, gap=0.01), "a new conversation"
    await log.answered(CHAT, ask_after_seconds=SOON)
    assert [chat for chat, _ in await due_soon(log)] == [CHAT], "no handoff open: its question falls due"


async def test_customer_messages_relayed_during_a_handoff_keep_the_conversation(log: ConversationLog) -> None:
    gap = 0.2
    await message(log, gap=gap)
    await log.answered(CHAT, ask_after_seconds=3600)
    await log.handoff_opened(CHAT, private=True)
    for update in ("u2", "u3", "u3"):  # the customer keeps writing to the operator (u3 redelivered)
        await asyncio.sleep(gap * 0.6)
        await log.relayed(CHAT, item_id=update)
    assert await log.due() == [], "nothing scheduled by a relayed message"
    await log.handoff_ended(CHAT, ask=False)
    assert not await message(log, gap=gap), "'thanks!' right after /close: the same conversation"
    (record,) = await log.conversations(0)
    assert record.messages == 4 and not record.resolved


async def test_a_handoff_in_a_group_starts_a_group_conversation_never_asked(log: ConversationLog) -> None:
    group = -1001234
    assert await log.handoff_opened(group, private=False) == (True, True)  # "/operator" in the group
    await log.handoff_ended(group, ask=True)  # the operator's /close
    assert await log.begin_ask(group) is None and await log.due() == [], "never asked in a group"
    (record,) = await log.conversations(0)
    assert not record.private


async def test_a_redelivered_update_is_counted_once(log: ConversationLog) -> None:
    for update in ("u1", "u1", "u2"):
        await log.customer_message(CHAT, private=True, language="en", gap_seconds=3600, item_id=update)
    (record,) = await log.conversations(0)
    assert record.messages == 2


async def test_a_conversation_starts_when_its_first_message_was_sent(log: ConversationLog) -> None:
    sent_ms = int(time.time() * 1000) - 5000  # the update waited 5 s in the queue
    await log.customer_message(CHAT, private=True, language="en", gap_seconds=3600, sent_ms=sent_ms)
    first = await log.answered(CHAT, ask_after_seconds=0)
    (record,) = await log.conversations(0)
    assert record.started_ms == sent_ms and first is not None and first >= 5


async def test_a_refused_question_is_never_retried_nor_counted_as_asked(log: ConversationLog) -> None:
    await message(log)
    await log.answered(CHAT, ask_after_seconds=SOON)
    await due_soon(log)
    ask = await log.begin_ask(CHAT)
    assert ask is not None and await log.asked(CHAT, ask.conversation, sent=False)
    assert await log.begin_ask(CHAT) is None and await log.due() == [], "never tried again"
    assert Figures.of(await log.conversations(0)).asked == 0
    assert await log.rate(CHAT, ask.conversation, "no", item_id="u9") == "none", "no question, no rating"


async def test_a_press_on_a_question_never_asked_is_not_a_rating(log: ConversationLog) -> None:
    await message(log)
    await log.answered(CHAT, ask_after_seconds=3600)
    (record,) = await log.conversations(0)
    assert await log.rate(CHAT, record.started_ms, "no", item_id="forged") == "none"
    assert Figures.of(await log.conversations(0)).rated_no == 0


async def test_redis_prunes_an_active_chats_records_past_the_ttl() -> None:
    """The chat's hash lives as long as it is written; its records older than the TTL go, as in memory."""
    import fakeredis

    from services.backends.memory.quality import InMemoryConversationLog
    from services.backends.redis.quality import RedisConversationLog
    from tests.conftest import TEST_KEYS

    client = fakeredis.FakeAsyncRedis()
    redis_log = RedisConversationLog(redis=client, keys=TEST_KEYS, ttl_seconds=0.3)  # type: ignore[arg-type]
    memory_log = InMemoryConversationLog(ttl_seconds=0.3)  # type: ignore[arg-type]
    for _ in range(8):  # a conversation every 0.1 s (gap 0.05 s), the hash written each time
        for each in (redis_log, memory_log):
            await each.customer_message(CHAT, private=True, language="en", gap_seconds=0.05)
        await asyncio.sleep(0.1)
    fields = [f for f in await client.hkeys(TEST_KEYS.chat(CHAT).quality) if f.startswith(b"c:")]
    assert len(fields) <= len(memory_log._chats[CHAT].records) + 1 <= 5, f"redis keeps {len(fields)} records"
