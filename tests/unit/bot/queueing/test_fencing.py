"""Fencing and quarantine on the Redis store (fakeredis and a real redis-server): a worker that lost a
chat's lease cannot write, whatever it loaded; an unreadable session is moved aside, byte for byte."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import fakeredis
import pytest
from redis.asyncio import Redis

from services.backends.redis.keys import KeySpace
from services.backends.redis.store import RedisSessionStore
from services.core.errors import CorruptSessionError, LeaseLostError
from services.core.fence import Fence
from services.core.records import NewMessage

KEYS = KeySpace("f", "123456")


def turn(n: int) -> list[NewMessage]:
    return [NewMessage("user", f"question {n}", 10), NewMessage("assistant", f"answer {n}", 20)]


@pytest.fixture(params=["fakeredis", "redis-server"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    if request.param == "fakeredis":
        redis: Redis = fakeredis.FakeAsyncRedis()
    else:
        redis = Redis.from_url(request.getfixturevalue("redis_server").url)
        await redis.flushdb()
    yield redis
    await redis.aclose()


def fence(token: str) -> Fence:
    return Fence(token, valid_until=time.monotonic() + 30)


async def test_every_write_is_refused_without_the_lease(client: Redis) -> None:
    store = RedisSessionStore(redis=client, keys=KEYS)
    await client.set(KEYS.chat(1).lease, "worker-b")
    stale = fence("worker-a")
    with pytest.raises(LeaseLostError):
        await store.commit_turn(1, expected_version=0, messages=turn(0), turn_id="u1", fence=stale)
    with pytest.raises(LeaseLostError):
        await store.mark_replied(1, "u1", fence=stale)
    with pytest.raises(LeaseLostError):
        await store.reset(1, fence=stale)
    with pytest.raises(LeaseLostError):
        await store.forget(1, fence=stale)
    assert await client.keys(f"{KEYS.namespace}:*") == [KEYS.chat(1).lease.encode()], "nothing written"
    await store.commit_turn(1, expected_version=0, messages=turn(0), turn_id="u1", fence=fence("worker-b"))
    assert len((await store.load(1)).messages) == 2


async def test_an_expired_lease_refuses_writes_too(client: Redis) -> None:
    store = RedisSessionStore(redis=client, keys=KEYS)
    with pytest.raises(LeaseLostError):  # nobody holds the chat (the lease expired): still not ours
        await store.commit_turn(1, expected_version=0, messages=turn(0), fence=fence("worker-a"))


async def test_two_bots_on_one_redis_never_share_a_session(client: Redis) -> None:
    """Regression: keys carried no bot id, and a private chat's id is the user's id in every bot."""
    first = RedisSessionStore(redis=client, keys=KeySpace("sb", "111"))
    second = RedisSessionStore(redis=client, keys=KeySpace("sb", "222"))
    await first.commit_turn(42, expected_version=0, messages=turn(0))
    assert (await second.load(42)).messages == ()


@pytest.mark.parametrize(
    "damage",
    [
        {"meta": {"summary": '{"topic": "x", "field_from_a_newer_release": 1}'}},
        {"msgs": [b'{"s":0,"r":"user","c":"hi","t":3}', b"\xff not json"]},
        {"meta": {"version": "seven"}},
        {"msgs_as_string": b"not a list"},
    ],
)
async def test_an_unreadable_session_is_quarantined_byte_for_byte(client: Redis, damage: dict[str, object]) -> None:
    store = RedisSessionStore(redis=client, keys=KEYS)
    keys = KEYS.chat(5)
    await client.hset(keys.meta, mapping={"version": "3", **damage.get("meta", {})})  # type: ignore[dict-item]
    for raw in damage.get("msgs", []):  # type: ignore[attr-defined]
        await client.rpush(keys.msgs, raw)
    if "msgs_as_string" in damage:  # a key of the wrong type (WRONGTYPE on every read)
        await client.set(keys.msgs, damage["msgs_as_string"])  # type: ignore[arg-type]
    meta_before = await client.hgetall(keys.meta)
    msgs_before = await client.dump(keys.msgs)
    with pytest.raises(CorruptSessionError):
        await store.load(5)
    await store.quarantine(5, reason="test")
    assert await client.hgetall(keys.q_meta) == meta_before
    assert await client.dump(keys.q_msgs) == msgs_before
    session = await store.load(5)
    assert session.messages == () and session.summary is None and session.version >= 1
    await store.forget(5)
    assert not await client.exists(keys.q_meta, keys.q_msgs, keys.q_info), "/forget deletes quarantined data"


async def test_media_records_are_refused_without_the_lease(client: Redis) -> None:
    """A worker that lost the chat (its transcription finished after the new owner ran /forget) must
    not leave a transcript, a note or an album photo behind: the writes run in its fence's context."""
    from services.backends.redis.media import RedisAlbums, RedisMediaMemos
    from services.core.fence import CURRENT_FENCE
    from services.ports.media import AlbumItem

    memos, albums = RedisMediaMemos(redis=client, keys=KEYS), RedisAlbums(redis=client, keys=KEYS)
    await client.set(KEYS.chat(1).lease, "worker-b")
    token = CURRENT_FENCE.set(fence("worker-a"))
    try:
        with pytest.raises(LeaseLostError):
            await memos.put(1, "transcript", "u1", "my card number is 4111...")
        with pytest.raises(LeaseLostError):
            await albums.add(1, "g1", AlbumItem(10, "file-10", "uniq-10", "caption"))
    finally:
        CURRENT_FENCE.reset(token)
    assert await client.keys(f"{KEYS.namespace}:*") == [KEYS.chat(1).lease.encode()], "nothing written"
    await memos.put(1, "transcript", "u1", "outside a worker (the intake, one process): written")
    assert await albums.add(1, "g1", AlbumItem(10, "file-10", "uniq-10")) == 1


async def lease_lapses(client: Redis, key: str) -> None:
    """Let the lease ``key`` run out now (it is set without an expiry, so a busy machine cannot let it
    lapse before the write that needs it) and wait, on the condition, until Redis expired it."""
    await client.pexpire(key, 1)
    for _ in range(500):
        if not await client.exists(key):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{key} did not expire")


async def test_a_sent_reply_is_recorded_after_the_lease_lapsed_while_nobody_took_the_chat(client: Redis) -> None:
    """Issue 36: Redis stalled past the lease between the reply going out and its record. Nobody else
    took the chat, so the record is still true and is kept (refusing it made the next worker send the
    reply a second time); a write that decides something still needs the lease."""
    store = RedisSessionStore(redis=client, keys=KEYS)
    lease = KEYS.chat(1).lease
    await client.set(lease, "worker-a")  # lapses when the test says
    a = fence("worker-a")
    await store.commit_turn(1, expected_version=0, messages=turn(0), turn_id="u1", fence=a)
    await lease_lapses(client, lease)
    with pytest.raises(LeaseLostError):
        await store.commit_turn(1, expected_version=1, messages=turn(1), turn_id="u2", fence=a)
    await store.mark_replied(1, "u1", fence=a)
    assert (await store.turn_status(1, "u1")).replied


async def test_a_sent_reply_is_not_recorded_once_another_worker_took_the_chat(client: Redis) -> None:
    """The other half of the rule: a lease that another worker took refuses the record too."""
    store = RedisSessionStore(redis=client, keys=KEYS)
    lease = KEYS.chat(1).lease
    await client.set(lease, "worker-a")  # lapses when the test says
    await store.commit_turn(1, expected_version=0, messages=turn(0), turn_id="u1", fence=fence("worker-a"))
    await lease_lapses(client, lease)
    await client.set(lease, "worker-b")
    with pytest.raises(LeaseLostError):
        await store.mark_replied(1, "u1", fence=fence("worker-a"))
    assert not (await store.turn_status(1, "u1")).replied
