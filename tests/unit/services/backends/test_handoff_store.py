"""The handoff store contract, over every backend (memory, fakeredis, redis-server, Redis Cluster)."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.backends.redis.backend import RedisBackend
from services.core.errors import CorruptSessionError, LeaseLostError, StoreUnavailableError
from services.core.fence import Fence
from services.core.handoff_records import TRANSCRIPT_KEPT, Handoff, TranscriptEntry
from services.core.records import NewMessage
from services.ports.backend import Backend

CHAT = 4242
GROUP = -1001234567890


async def test_open_record_close_keeps_the_topic(backend: Backend) -> None:
    handoffs = backend.handoffs
    assert (await handoffs.get(CHAT)).state == "none"
    await handoffs.set_topic(CHAT, GROUP, 77)
    assert await handoffs.start(CHAT, reason="asked", trigger="command", language="ru")
    assert not await handoffs.start(CHAT, reason="again", trigger="model", language="en"), "already open"
    record = await handoffs.get(CHAT)
    assert (record.state, record.topic_id, record.reason, record.trigger, record.language) == (
        "open",
        77,
        "asked",
        "command",
        "ru",
    )
    first = await handoffs.record(CHAT, "u1", TranscriptEntry("customer", "photo of the stand"))
    assert first.new and first.first_reply_seconds is None
    reply = await handoffs.record(CHAT, "u2", TranscriptEntry("operator", "refund approved"))
    assert reply.new and reply.first_reply_seconds is not None and reply.first_reply_seconds >= 0
    again = await handoffs.record(CHAT, "u2", TranscriptEntry("operator", "refund approved"))
    assert not again.new, "a relayed id is recorded once"
    later = await handoffs.record(CHAT, "u3", TranscriptEntry("operator", "sent"))
    assert later.first_reply_seconds is None, "only the first operator message counts"
    assert await handoffs.relay_state(CHAT, "u2") == "done" and await handoffs.relay_state(CHAT, "u9") == "new"
    await handoffs.begin_relay(CHAT, "u9")
    assert await handoffs.relay_state(CHAT, "u9") == "started", "a copy began and was not recorded"
    await handoffs.record(CHAT, "u9", TranscriptEntry("customer", "late"))
    assert await handoffs.relay_state(CHAT, "u9") == "done"
    await handoffs.begin_relay(CHAT, "u9")
    assert await handoffs.relay_state(CHAT, "u9") == "done", "done stays done"
    record = await handoffs.get(CHAT)
    assert [e.text for e in record.transcript] == ["photo of the stand", "refund approved", "sent", "late"]
    assert await handoffs.flag(CHAT) and not await handoffs.flag(CHAT)
    assert await handoffs.end(CHAT) and not await handoffs.end(CHAT)
    record = await handoffs.get(CHAT)
    assert (record.state, record.topic_id) == ("closed", 77)
    assert await handoffs.start(CHAT, reason="second", trigger="model", language="en")
    record = await handoffs.get(CHAT)
    assert record.transcript == () and not record.flagged and record.topic_id == 77


async def test_topics_deadlines_and_open_count(backend: Backend) -> None:
    handoffs = backend.handoffs
    await handoffs.bind_topic(GROUP, 77, CHAT)
    await handoffs.bind_topic(GROUP, 77, CHAT)
    assert await handoffs.chat_of_topic(GROUP, 77) == CHAT
    assert await handoffs.chat_of_topic(GROUP, 78) is None
    await handoffs.track(CHAT, open=True, reply_within=0)
    await handoffs.track(CHAT + 1, open=True, reply_within=3600)
    assert await handoffs.open_count() == 2
    deadline = time.monotonic() + 5
    while await handoffs.due() != [CHAT]:  # the deadline is "now"; the clock must pass it
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await handoffs.track(CHAT, open=True, reply_within=None)
    assert await handoffs.due() == []
    await handoffs.unbind(CHAT, GROUP, 77)
    assert await handoffs.chat_of_topic(GROUP, 77) is None
    assert await handoffs.open_count() == 1


async def test_forget_chat_deletes_the_handoff(backend: Backend) -> None:
    await backend.store.commit_turn(CHAT, expected_version=0, messages=[NewMessage("user", "order 7718", 5)])
    await backend.handoffs.set_topic(CHAT, GROUP, 77)
    await backend.handoffs.bind_topic(GROUP, 77, CHAT)
    await backend.handoffs.start(CHAT, reason="asked", trigger="command", language="en")
    await backend.handoffs.track(CHAT, open=True, reply_within=900)
    await backend.handoffs.record(CHAT, "u1", TranscriptEntry("customer", "order 7718 cracked"))
    await backend.forget_chat(CHAT)
    assert (await backend.handoffs.get(CHAT)).state == "none"
    assert await backend.handoffs.relay_state(CHAT, "u1") == "new"
    assert await backend.handoffs.chat_of_topic(GROUP, 77) is None
    assert await backend.handoffs.open_count() == 0
    if isinstance(backend, RedisBackend):
        keys = [k async for k in backend.redis.scan_iter(match="*")]
        chat_keys = [k for k in keys if f"{{chat:{CHAT}}}".encode() in k]
        assert all(k.endswith((b":meta", b":rate")) for k in chat_keys), chat_keys
        assert await backend.redis.hlen(backend.keys.chat(CHAT).meta) == 1, "only the version counter"


async def test_writes_of_a_worker_without_the_lease_are_refused(backend: Backend) -> None:
    if not isinstance(backend, RedisBackend):
        pytest.skip("one process has no leases")
    keys = backend.keys.chat(CHAT)
    await backend.redis.set(keys.lease, "someone-else")
    fence = Fence("me", valid_until=time.monotonic() + 30)
    for write in (
        backend.handoffs.start(CHAT, reason="r", trigger="command", language="en", fence=fence),
        backend.handoffs.set_topic(CHAT, GROUP, 1, fence=fence),
        backend.handoffs.record(CHAT, "u1", TranscriptEntry("customer", "x"), fence=fence),
        backend.handoffs.end(CHAT, fence=fence),
        backend.handoffs.begin_relay(CHAT, "u1", fence=fence),
        backend.handoffs.flag(CHAT, fence=fence),
    ):
        with pytest.raises(LeaseLostError):
            await write
    assert (await backend.handoffs.get(CHAT)).state == "none"


async def test_nothing_is_recorded_for_a_handoff_forgotten_or_closed_meanwhile(backend: Backend) -> None:
    h = backend.handoffs
    await h.set_topic(CHAT, GROUP, 77)
    await h.start(CHAT, reason="asked", trigger="command", language="en", item_id="u1")
    assert (await h.get(CHAT)).opened_by == "u1"
    await h.end(CHAT, item_id="u5")
    closed = await h.get(CHAT)
    assert closed.closed_by == "u5"
    assert not (await h.record(CHAT, "u6", TranscriptEntry("operator", "too late"))).new
    assert (await h.record(CHAT, "u5:closed-topic", None)).new, "a notice's mark is kept after the close"
    assert await h.relay_state(CHAT, "u5:closed-topic") == "done"
    assert (await h.get(CHAT)).transcript == ()
    await backend.forget_chat(CHAT)
    await h.begin_relay(CHAT, "u7")
    assert not (await h.record(CHAT, "u7", TranscriptEntry("operator", "after /forget"))).new
    assert not (await h.record(CHAT, "u8", None)).new
    assert await h.get(CHAT) == Handoff()
    assert await h.relay_state(CHAT, "u7") == "new"
    if isinstance(backend, RedisBackend):
        keys = [k async for k in backend.redis.scan_iter(match="*")]
        assert not [k for k in keys if b"handoff" in k and f"{{chat:{CHAT}}}".encode() in k], keys


async def test_the_transcript_keeps_its_newest_entries_and_goes_with_the_close(backend: Backend) -> None:
    h = backend.handoffs
    await h.set_topic(CHAT, GROUP, 77)
    await h.start(CHAT, reason="asked", trigger="command", language="en")
    for n in range(TRANSCRIPT_KEPT + 5):
        await h.record(CHAT, f"u{n}", TranscriptEntry("customer", f"line {n}"))
    transcript = (await h.get(CHAT)).transcript
    assert len(transcript) == TRANSCRIPT_KEPT and transcript[0].text == "line 5"
    assert (await h.get(CHAT, transcript=False)).transcript == ()
    await h.end(CHAT)
    assert (await h.get(CHAT)).transcript == ()
    if isinstance(backend, RedisBackend):
        assert not await backend.redis.exists(backend.keys.chat(CHAT).handoff_log)


async def test_removing_a_deadline_leaves_the_open_set_alone(backend: Backend) -> None:
    h = backend.handoffs
    await h.track(CHAT, open=False, reply_within=0)
    await h.track(CHAT, open=None, reply_within=None)
    assert await h.open_count() == 0 and await h.due() == []
    await h.track(CHAT, open=True, reply_within=0)
    await h.track(CHAT, open=None, reply_within=None)
    assert await h.open_count() == 1 and await h.due() == []


async def test_forget_chat_redone_after_a_failure_still_unbinds_the_topic(backend: Backend) -> None:
    h = backend.handoffs
    await h.set_topic(CHAT, GROUP, 77)
    await h.bind_topic(GROUP, 77, CHAT)
    await h.start(CHAT, reason="asked", trigger="command", language="en")
    real_unbind = h.unbind
    calls = {"n": 0}

    async def unbind_fails_once(chat_id: int, group_id: int | None, topic_id: int | None) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreUnavailableError("the process dies here")
        await real_unbind(chat_id, group_id, topic_id)

    h.unbind = unbind_fails_once  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError):
        await backend.forget_chat(CHAT)
    await backend.forget_chat(CHAT)  # the /forget redone
    assert await h.chat_of_topic(GROUP, 77) is None, "the topic stays bound to a forgotten chat"
    assert (await h.get(CHAT)).state == "none"


async def test_forget_chat_does_not_need_to_read_the_transcript(backend: Backend) -> None:
    if not isinstance(backend, RedisBackend):
        pytest.skip("the in-process store holds no serialized transcript")
    h = backend.handoffs
    await h.set_topic(CHAT, GROUP, 77)
    await h.start(CHAT, reason="asked", trigger="command", language="en")
    await backend.redis.rpush(backend.keys.chat(CHAT).handoff_log, "not json")
    with pytest.raises(CorruptSessionError):
        await h.get(CHAT)
    await backend.forget_chat(CHAT)
    assert await h.get(CHAT) == Handoff()


async def test_topic_ids_of_different_groups_are_different_topics(backend: Backend) -> None:
    h = backend.handoffs
    other = GROUP - 1
    await h.set_topic(CHAT, GROUP, 77)
    await h.bind_topic(GROUP, 77, CHAT)
    await h.bind_topic(other, 77, CHAT + 1)
    record = await h.get(CHAT)
    assert (record.topic_group, record.topic_id) == (GROUP, 77)
    assert await h.chat_of_topic(GROUP, 77) == CHAT
    assert await h.chat_of_topic(other, 77) == CHAT + 1
    await backend.forget_chat(CHAT)
    assert await h.chat_of_topic(GROUP, 77) is None
    assert await h.chat_of_topic(other, 77) == CHAT + 1, "another group's topic 77 was unbound"
