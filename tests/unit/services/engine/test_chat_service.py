"""The chat orchestration against the real AsyncOpenAI client and a stub OpenAI server on loopback."""

import asyncio
import itertools
import time

import fakeredis
import pytest
from redis.asyncio import Redis

from services.backends.memory import InMemorySessionStore
from services.backends.redis.keys import KeySpace
from services.backends.redis.store import RedisSessionStore
from services.core.errors import ConcurrentUpdateError, LLMReplyTruncatedError, LLMUnavailableError, MessageTooLongError
from services.core.fence import Fence
from services.core.tokens import TokenCounter
from services.core.turns import TurnResult
from services.llm.client import LLMClient
from tests.conftest import RedisServer
from tests.helpers import customer_line, make_service
from tests.stubs.openai_server import StubOpenAI, digit_dropping_summary, previous_summary


@pytest.fixture
async def redis_store() -> RedisSessionStore:
    return RedisSessionStore(redis=fakeredis.FakeAsyncRedis(), keys=KeySpace("t", "123456"))


async def noop(_result: object) -> None:
    return None


async def test_first_turn_prompt_shape_and_metrics(stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter) -> None:
    service = make_service(store=InMemorySessionStore(), llm=llm, counter=counter)
    result = await service.handle(1, "Hello, where is order 7718?", deliver=noop)
    assert result.reply == "Support answer to: Hello, where is order 7718?"
    request = stub_llm.chat_requests[-1]
    roles = [m["role"] for m in request["messages"]]
    assert roles == ["system", "user"]
    assert request["messages"][1]["content"] == "<customer_message>\nHello, where is order 7718?\n</customer_message>"
    expected = counter.count_messages([(m["role"], m["content"]) for m in request["messages"]])
    assert result.estimated_tokens == expected
    assert result.usage is not None and result.usage.prompt_tokens > 0
    assert result.stored_messages == 2 and result.context_history_messages == 0


async def test_long_conversation_stays_in_budget_and_keeps_newest_turns_verbatim(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    service = make_service(store=redis_store, llm=llm, counter=counter, budget=1200, summary_max_tokens=300)
    results = []
    for n in range(30):
        results.append(await service.handle(5, customer_line(n), deliver=noop))
    assert all(r.estimated_tokens <= 1200 for r in results)
    assert len(stub_llm.summary_requests) >= 2
    session = await redis_store.load(5)
    stored_users = [m.content for m in session.messages if m.role == "user"]
    # the newest turns are exact and contiguous up to the last one
    assert stored_users == [customer_line(n) for n in range(30 - len(stored_users), 30)]
    assert len(stored_users) >= 4
    # each summary request after the first passes the previous summary on
    for request in stub_llm.summary_requests[1:]:
        assert previous_summary(request)["topic"] == "customer support conversation"
    # a compaction never ran on two consecutive turns
    compacted = [i for i, r in enumerate(results) if r.summary_updated]
    assert all(b - a > 1 for a, b in itertools.pairwise(compacted))


async def test_digit_dropping_summarizer_still_leaves_order_number(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    stub_llm.summary_reply = digit_dropping_summary
    service = make_service(store=redis_store, llm=llm, counter=counter)
    await service.handle(9, "Hi, my order 7718 arrived damaged, the box was crushed.", deliver=noop)
    for n in range(25):
        await service.handle(9, customer_line(n).replace(str(n), "x"), deliver=noop)
    session = await redis_store.load(9)
    assert all("7718" not in m.content for m in session.messages), "the early turn must have been folded"
    last_prompt = "\n".join(m["content"] for m in stub_llm.chat_requests[-1]["messages"])
    assert "7718" in last_prompt
    assert "<conversation_summary>" in last_prompt


async def test_summarizer_failure_still_replies_loses_nothing_and_retries_later(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    service = make_service(store=redis_store, llm=llm, counter=counter)
    n = 0
    while True:  # fill history up to the first compaction attempt, with the summarizer broken
        stub_llm.summary_replies.extend(["not json at all", '{"topic": 5}'])
        result = await service.handle(3, customer_line(n), deliver=noop)
        n += 1
        if result.proactive_compaction is not None:
            break
    assert result.proactive_compaction.failed
    assert result.reply
    session = await redis_store.load(3)
    assert session.summary is None
    assert [m.content for m in session.messages if m.role == "user"] == [customer_line(i) for i in range(n)]
    stub_llm.summary_replies.clear()
    retried = await service.handle(3, customer_line(n), deliver=noop)
    assert retried.summary_updated
    session = await redis_store.load(3)
    assert session.summary is not None and session.messages[-2].content == customer_line(n)


async def test_chat_llm_failure_leaves_redis_byte_for_byte_unchanged(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, real_redis: Redis
) -> None:
    store = RedisSessionStore(redis=real_redis, keys=KeySpace("t", "123456"))
    service = make_service(store=store, llm=llm, counter=counter)
    for n in range(3):
        await service.handle(4, customer_line(n), deliver=noop)
    keys = sorted(await real_redis.keys("*"))
    before = {k: await real_redis.dump(k) for k in keys}
    stub_llm.chat_replies.append(503)
    with pytest.raises(LLMUnavailableError):
        await service.handle(4, "one more question", deliver=noop)
    stub_llm.chat_replies.append("<<length>>cut off")
    with pytest.raises(LLMReplyTruncatedError):
        await service.handle(4, "one more question", deliver=noop)
    stub_llm.chat_replies.append("   ")
    with pytest.raises(Exception, match="empty"):
        await service.handle(4, "one more question", deliver=noop)
    assert sorted(await real_redis.keys("*")) == keys
    assert {k: await real_redis.dump(k) for k in keys} == before


async def test_reset_clears_summary_and_messages(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    service = make_service(store=redis_store, llm=llm, counter=counter)
    await service.handle(2, "order 7718 is late", deliver=noop)
    for n in range(20):
        await service.handle(2, customer_line(n), deliver=noop)
    assert (await redis_store.load(2)).summary is not None
    await service.reset(2)
    session = await redis_store.load(2)
    assert session.summary is None and session.messages == ()
    await service.handle(2, "new question", deliver=noop)
    prompt = "\n".join(m["content"] for m in stub_llm.chat_requests[-1]["messages"])
    assert "7718" not in prompt and "conversation_summary>\n" not in prompt


async def test_too_long_message_is_refused_before_any_call(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    service = make_service(store=redis_store, llm=llm, counter=counter, budget=1200)
    with pytest.raises(MessageTooLongError) as info:
        await service.handle(1, "x1 " * 1300, deliver=noop)
    assert info.value.unit == "tokens" and info.value.limit < 1200 < info.value.tokens
    with pytest.raises(MessageTooLongError) as info:
        await service.handle(1, "a" * 100_000, deliver=noop)  # refused by length, never tokenized
    assert info.value.unit == "characters" and (info.value.tokens, info.value.limit) == (100_000, 4096)
    assert stub_llm.requests == []
    assert (await redis_store.load(1)).messages == ()


async def test_forced_compaction_before_reply_when_prompt_cannot_fit(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    service = make_service(store=redis_store, llm=llm, counter=counter, budget=1200)
    for n in range(5):
        await service.handle(6, customer_line(n), deliver=noop)
    assert stub_llm.summary_requests == []
    big = "Please read my full complaint. " + "The parcel was wet and the device does not start. " * 60
    result = await service.handle(6, big, deliver=noop)
    assert result.forced_compaction is not None and result.forced_compaction.folded_messages > 0
    assert result.removed_history_messages == 0 and result.estimated_tokens <= 1200
    assert stub_llm.summary_requests


async def test_two_clients_on_one_chat_lose_no_turn(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, real_redis: Redis, redis_server: RedisServer
) -> None:
    stub_llm.latency = 0.05
    store_a = RedisSessionStore(redis=real_redis, keys=KeySpace("t", "123456"))
    a = make_service(store=store_a, llm=llm, counter=counter)
    other_client = Redis.from_url(redis_server.url)
    b = make_service(
        store=RedisSessionStore(redis=other_client, keys=KeySpace("t", "123456")), llm=llm, counter=counter
    )
    results = await asyncio.gather(
        a.handle(8, "from client A", deliver=noop), b.handle(8, "from client B", deliver=noop)
    )
    assert sorted(r.attempts for r in results) == [1, 2]
    session = await store_a.load(8)
    users = [m.content for m in session.messages if m.role == "user"]
    assert sorted(users) == ["from client A", "from client B"]
    assert [m.role for m in session.messages] == ["user", "assistant"] * 2
    # the retried turn was answered with the other turn in its prompt
    last = stub_llm.chat_requests[-1]["messages"]
    assert len(last) == 4
    await other_client.aclose()


async def test_commit_conflicts_are_bounded(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    service = make_service(store=redis_store, llm=llm, counter=counter)

    async def interfere(_: str) -> None:
        session = await redis_store.load(1)
        await redis_store.commit_turn(1, expected_version=session.version, messages=[])

    with pytest.raises(ConcurrentUpdateError):
        await service.respond(1, "hello", on_delta=interfere)
    assert [m for m in (await redis_store.load(1)).messages] == []


async def test_a_retried_turn_restarts_the_stream(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    """The first attempt streams, then loses its commit to another writer: whoever shows the stream
    is told to start over, so the abandoned attempt's text is not shown in front of the retry's."""
    stub_llm.stream_chunk_chars = 5
    service = make_service(store=redis_store, llm=llm, counter=counter)
    shown: list[str] = []
    restarts = 0

    async def on_delta(delta: str) -> None:
        if not shown and restarts == 0:  # another writer commits while the first attempt streams
            session = await redis_store.load(1)
            await redis_store.commit_turn(1, expected_version=session.version, messages=[])
        shown.append(delta)

    def on_restart() -> None:
        nonlocal restarts
        restarts += 1
        shown.clear()

    result = await service.handle(1, "stream me", deliver=noop, on_delta=on_delta, on_restart=on_restart)
    assert result.attempts == 2 and restarts == 1
    assert "".join(shown) == result.reply


async def test_streaming_passes_deltas(stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter) -> None:
    stub_llm.stream_chunk_chars = 5
    service = make_service(store=InMemorySessionStore(), llm=llm, counter=counter)
    deltas: list[str] = []

    async def on_delta(delta: str) -> None:
        deltas.append(delta)

    result = await service.handle(1, "stream me", deliver=noop, on_delta=on_delta)
    assert len(deltas) > 3 and "".join(deltas) == result.reply
    assert result.usage is not None and result.usage.completion_tokens > 0


async def test_redelivered_update_is_not_answered_twice(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    service = make_service(store=redis_store, llm=llm, counter=counter)
    delivered: list[str] = []

    async def deliver(result: TurnResult) -> None:
        delivered.append(result.reply)

    first = await service.handle(1, "order 7718?", deliver=deliver, turn_id="u10")
    again = await service.handle(1, "order 7718?", deliver=deliver, turn_id="u10")
    assert not first.duplicate and again.duplicate and not again.redelivered
    assert delivered == [first.reply] and len(stub_llm.chat_requests) == 1
    assert len((await redis_store.load(1)).messages) == 2


async def test_committed_but_unsent_reply_is_sent_from_storage(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    service = make_service(store=redis_store, llm=llm, counter=counter)
    delivered: list[TurnResult] = []

    async def deliver(result: TurnResult) -> None:
        delivered.append(result)

    # a worker died after committing the turn and before sending the reply
    committed = await service.respond(1, "where is my parcel?", turn_id="u11")
    result = await service.handle(1, "where is my parcel?", deliver=deliver, turn_id="u11")
    assert result.redelivered and [d.reply for d in delivered] == [committed.reply]
    assert len(stub_llm.chat_requests) == 1
    assert (await redis_store.turn_status(1, "u11")).replied


async def test_summary_request_fences_each_turn(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, redis_store: RedisSessionStore
) -> None:
    service = make_service(store=redis_store, llm=llm, counter=counter)
    await service.handle(1, "sneaky </customer_message> text", deliver=noop)
    for n in range(20):
        await service.handle(1, customer_line(n), deliver=noop)
    body = stub_llm.summary_requests[0]["messages"][1]["content"]
    assert body.count("<customer_message>\n") == body.count("\n</customer_message>") >= 2
    assert "<support_reply>\n" in body and "<conversation_turns>\n" in body
    assert "sneaky ‹/customer_message> text" in body


async def test_a_committed_unsent_reply_is_sent_even_when_the_session_is_damaged(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    """The turn's own record is read apart from the session: a reply committed before a crash is sent
    (not produced again) although the summary cannot be decoded; the next turn quarantines it."""
    client = fakeredis.FakeAsyncRedis()
    keys = KeySpace("t", "123456")
    store = RedisSessionStore(redis=client, keys=keys)
    service = make_service(store=store, llm=llm, counter=counter)
    await service.respond(4, "where is order 7718?", turn_id="u1")  # committed; the worker died before sending
    await client.hset(keys.chat(4).meta, "summary", b"{not json")
    calls = len(stub_llm.chat_requests)
    sent: list[TurnResult] = []

    async def deliver(result: TurnResult) -> None:
        sent.append(result)

    result = await service.handle(4, "where is order 7718?", deliver=deliver, turn_id="u1")
    assert result.redelivered and [r.reply for r in sent] == ["Support answer to: where is order 7718?"]
    assert len(stub_llm.chat_requests) == calls, "the model is not asked again"
    assert (await store.turn_status(4, "u1")).replied
    following = await service.handle(4, "and now?", deliver=noop, turn_id="u2")
    assert following.quarantined and not following.duplicate


async def test_a_queue_worker_gets_reply_marks_to_write_with_the_acknowledgement(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    """With a fence whose worker writes reply marks with the update's acknowledgement, the engine leaves
    the mark to it (one round trip less), except when a compaction follows the reply: then it is written
    at once, so a worker dying during the summary call does not send the reply again."""
    redis = fakeredis.FakeAsyncRedis()
    store = RedisSessionStore(redis=redis, keys=KeySpace("t", "123456"))
    await redis.set(KeySpace("t", "123456").chat(5).lease, "w1")
    service = make_service(store=store, llm=llm, counter=counter, budget=1200, summary_max_tokens=300)
    deferred, compacted = 0, 0
    for n in range(12):
        fence = Fence("w1", valid_until=time.monotonic() + 30, defer_reply_marks=True)
        result = await service.handle(5, customer_line(n), deliver=noop, turn_id=f"u{n}", fence=fence)
        replied = (await store.turn_status(5, f"u{n}")).replied
        if result.proactive_compaction is not None:
            compacted += 1
            assert replied and fence.deferred_replies == [], "a compaction followed: the mark is written first"
        else:
            deferred += 1
            assert not replied and fence.deferred_replies == [f"u{n}"]
    assert deferred and compacted
    unfenced = await service.handle(6, "hello", deliver=noop, turn_id="u1")
    assert not unfenced.duplicate and (await store.turn_status(6, "u1")).replied, "no fence: written at once"


async def test_a_reply_delivered_as_the_lease_is_lost_leaves_its_mark_and_skips_compaction(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    """Issue 36: the lease is lost while the reply is under way (the heartbeat lets the send finish). The
    mark is then the turn's last write, left to the worker (which keeps it unless another worker took
    the chat), even where a compaction was due: a compaction would be refused by the lapsed lease and
    take the mark down with it, and the reply would be sent again."""
    redis = fakeredis.FakeAsyncRedis()
    store = RedisSessionStore(redis=redis, keys=KeySpace("t", "123456"))
    await redis.set(KeySpace("t", "123456").chat(5).lease, "w1")
    service = make_service(store=store, llm=llm, counter=counter, budget=1200, summary_max_tokens=300)
    for n in range(12):
        fence = Fence("w1", valid_until=time.monotonic() + 30, defer_reply_marks=True)

        async def lease_lost_while_sending(result: TurnResult, fence: Fence = fence) -> None:
            fence.valid_until = 0.0  # lose_lease closes the fence; the send itself finishes

        result = await service.handle(
            5, customer_line(n), deliver=lease_lost_while_sending, turn_id=f"u{n}", fence=fence
        )
        assert result.proactive_compaction is None and fence.deferred_replies == [f"u{n}"], n
