"""The handoff store contract, over every backend (memory, fakeredis, redis-server, Redis Cluster)."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.backends.redis.backend import RedisBackend
from services.engine.models import NewMessage
from services.errors import LeaseLostError
from services.fence import Fence
from services.handoff import TranscriptEntry
from services.ports import Backend

CHAT = 4242


async def test_open_record_close_keeps_the_topic(backend: Backend) -> None:
    handoffs = backend.handoffs
    assert (await handoffs.get(CHAT)).state == "none"
    await handoffs.set_topic(CHAT, 77)
    assert await handoffs.open(CHAT, reason="asked", trigger="command", language="ru")
    assert not await handoffs.open(CHAT, reason="again", trigger="model", language="en"), "already open"
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
    assert await handoffs.close(CHAT) and not await handoffs.close(CHAT)
    record = await handoffs.get(CHAT)
    assert (record.state, record.topic_id) == ("closed", 77)
    assert await handoffs.open(CHAT, reason="second", trigger="model", language="en")
    record = await handoffs.get(CHAT)
    assert record.transcript == () and not record.flagged and record.topic_id == 77


async def test_topics_deadlines_and_open_count(backend: Backend) -> None:
    handoffs = backend.handoffs
    await handoffs.bind_topic(77, CHAT)
    await handoffs.bind_topic(77, CHAT)
    assert await handoffs.chat_of_topic(77) == CHAT
    assert await handoffs.chat_of_topic(78) is None
    await handoffs.track(CHAT, open=True, reply_within=0)
    await handoffs.track(CHAT + 1, open=True, reply_within=3600)
    assert await handoffs.open_count() == 2
    deadline = time.monotonic() + 5
    while await handoffs.due() != [CHAT]:  # the deadline is "now"; the clock must pass it
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await handoffs.track(CHAT, open=True, reply_within=None)
    assert await handoffs.due() == []
    await handoffs.unbind(CHAT, 77)
    assert await handoffs.chat_of_topic(77) is None
    assert await handoffs.open_count() == 1


async def test_forget_chat_deletes_the_handoff(backend: Backend) -> None:
    await backend.store.commit_turn(CHAT, expected_version=0, messages=[NewMessage("user", "order 7718", 5)])
    await backend.handoffs.set_topic(CHAT, 77)
    await backend.handoffs.bind_topic(77, CHAT)
    await backend.handoffs.open(CHAT, reason="asked", trigger="command", language="en")
    await backend.handoffs.track(CHAT, open=True, reply_within=900)
    await backend.handoffs.record(CHAT, "u1", TranscriptEntry("customer", "order 7718 cracked"))
    await backend.forget_chat(CHAT)
    assert (await backend.handoffs.get(CHAT)).state == "none"
    assert await backend.handoffs.relay_state(CHAT, "u1") == "new"
    assert await backend.handoffs.chat_of_topic(77) is None
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
        backend.handoffs.open(CHAT, reason="r", trigger="command", language="en", fence=fence),
        backend.handoffs.set_topic(CHAT, 1, fence=fence),
        backend.handoffs.record(CHAT, "u1", TranscriptEntry("customer", "x"), fence=fence),
        backend.handoffs.close(CHAT, fence=fence),
        backend.handoffs.begin_relay(CHAT, "u1", fence=fence),
        backend.handoffs.flag(CHAT, fence=fence),
    ):
        with pytest.raises(LeaseLostError):
            await write
    assert (await backend.handoffs.get(CHAT)).state == "none"
