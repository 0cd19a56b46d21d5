"""The queue worker's lease handling and failure classification, with aiogram's real Dispatcher."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import fakeredis
from aiogram import Bot, Dispatcher
from aiogram.exceptions import TelegramNetworkError
from aiogram.methods import SendMessage
from aiogram.types import Message

from bot.factory import build_bot, build_dispatcher
from bot.provider_health import ProviderWatch
from bot.queueing.intake import Intake
from bot.queueing.worker import Worker
from bot.settings import BotSettings
from bot.telegram.texts import TEXTS
from services.backends.memory import InMemoryBackend
from services.backends.redis.deadletters import RedisDeadLetters
from services.backends.redis.keys import KeySpace
from services.backends.redis.queue import RedisWorkQueue
from services.backends.redis.store import RedisSessionStore
from services.core.errors import LeaseLostError, LLMUnavailableError, StoreUnavailableError
from services.core.fence import CURRENT_FENCE, Fence
from services.ports.deadletters import DeadLetter
from services.ports.queue import FINISHED, TOLD, Claim, QueueItem, Step
from tests.stubs.telegram_server import StubTelegram
from tests.worker_helpers import make_worker, update, update_json

KEYS = KeySpace("w", "123456")
TOKEN = "123456:TEST-token"


class FlakyQueue(RedisWorkQueue):
    """Redis goes away once under ``next``; ``renew`` is slow and swallows cancellation, as a client may."""

    fail_next_once = False
    slow_renew = 0.0
    swallow_cancel = False
    renew_calls = 0

    async def next(
        self, claim: Claim, *, done: QueueItem | None = None, acquire: bool = False, replied: Sequence[str] = ()
    ) -> Step:
        if self.fail_next_once and not acquire:
            self.fail_next_once = False
            await asyncio.sleep(0.15)  # let a heartbeat run first
            raise StoreUnavailableError("connection lost")
        return await super().next(claim, done=done, acquire=acquire, replied=replied)

    async def renew(self, claim: Claim) -> bool:
        self.renew_calls += 1
        try:
            await asyncio.sleep(self.slow_renew)  # a slow round trip: the cancellation lands here
            return await super().renew(claim)
        except asyncio.CancelledError:
            if self.swallow_cancel:
                return True
            raise


async def run_until(worker: Worker, done: asyncio.Event | None = None, within: float = 60.0) -> None:
    """Run ``worker`` until ``done`` is set (a deadline for a failing test only: generous)."""
    running = asyncio.create_task(worker.run())
    try:
        if done is not None:
            await asyncio.wait_for(done.wait(), within)
    finally:
        worker.stop()
        await running


async def test_heartbeat_stops_with_its_serve_loop_even_if_cancellation_is_swallowed(bot: Bot) -> None:
    queue = FlakyQueue(redis=fakeredis.FakeAsyncRedis(), keys=KEYS, lease_ms=300)
    queue.fail_next_once, queue.slow_renew, queue.swallow_cancel = True, 0.05, True
    dispatcher = Dispatcher()
    dispatcher.message.register(lambda message: None)
    worker = make_worker(queue, dispatcher, bot)
    await queue.enqueue(9, "u1", update_json(1, 9, "first"), order=1)
    claim = await queue.claim("w1:0")
    assert claim is not None
    await worker._serve(claim)  # the Redis error ends it while its heartbeat may be inside renew()
    calls = queue.renew_calls
    await asyncio.sleep(0.6)
    assert queue.renew_calls == calls, "the heartbeat kept renewing the lease of a chat nobody serves"


async def test_a_dead_serve_loop_never_keeps_its_lease(bot: Bot) -> None:
    redis = fakeredis.FakeAsyncRedis()
    queue = FlakyQueue(redis=redis, keys=KEYS, lease_ms=300)
    queue.fail_next_once = True
    seen: list[str] = []
    dispatcher = Dispatcher()
    answered = asyncio.Event()

    async def on_message(message: Message) -> None:
        seen.append(message.text or "")
        answered.set()

    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot)
    await queue.enqueue(9, "u1", update_json(1, 9, "first"), order=1)
    await queue.enqueue(9, "u2", update_json(2, 9, "second"), order=2)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(1200):  # the first serve loop dies on the Redis error; the chat must come back
            if "second" in seen:
                break
            await asyncio.sleep(0.05)
        # "first" was processed but its acknowledgement failed: it comes again (at least once; the chat
        # service recognises the turn id), and only then "second"
        assert seen[-1] == "second" and seen.count("second") == 1 and set(seen) == {"first", "second"}
        await asyncio.sleep(0.5)
        assert await redis.exists(KEYS.chat(9).lease) == 0, "no heartbeat outlived its serve loop"
    finally:
        worker.stop()
        await running


async def test_a_renewal_that_hangs_past_the_lease_cancels_the_handler(bot: Bot) -> None:
    """Regression: a heartbeat renewal that hung until the socket timeout let the lease lapse while the
    handler kept running, so two workers answered the same update. Now the renewal has a deadline inside
    the lease, and the handler is cancelled when the lease cannot be kept: it never reaches its send."""
    queue = FlakyQueue(redis=fakeredis.FakeAsyncRedis(), keys=KEYS, lease_ms=600)
    queue.slow_renew = 5.0  # every renewal hangs
    dispatcher = Dispatcher()
    sent: list[str] = []
    cancelled = asyncio.Event()

    async def on_message(message: Message, fence: Fence) -> None:
        try:
            await asyncio.sleep(60.0)  # a slow model call (cancelled well before)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        fence.ensure_valid()
        sent.append("reply")

    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot)
    await queue.enqueue(9, "u1", update_json(1, 9, "first"), order=1)
    await run_until(worker, cancelled)
    assert sent == []


async def test_a_poison_update_goes_to_the_dead_letters_and_the_chat_goes_on(bot: Bot) -> None:
    """Regression: an update whose handling always fails was retried forever, holding the chat."""
    redis = fakeredis.FakeAsyncRedis()
    queue = RedisWorkQueue(redis=redis, keys=KEYS, lease_ms=1000)
    dispatcher = Dispatcher()
    handled: list[str] = []
    after = asyncio.Event()

    async def on_message(message: Message) -> None:
        if message.text == "poison":
            raise RuntimeError("a bug this update triggers")
        handled.append(message.text or "")
        after.set()

    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot, max_attempts=2)
    await queue.enqueue(9, "u1", update_json(1, 9, "poison"), order=1)
    await queue.enqueue(9, "u2", "{not json", order=2)
    await queue.enqueue(9, "u3", update_json(3, 9, "after"), order=3)
    await run_until(worker, after)
    assert handled == ["after"]
    letters = await RedisDeadLetters(redis=redis, keys=KEYS).list()
    assert {letter.item_id for letter in letters} == {"u1", "u2"}
    poison = next(letter for letter in letters if letter.item_id == "u1")
    assert poison.attempts == 3 and poison.chat_id == 9 and json.loads(poison.payload)["update_id"] == 1
    assert await redis.exists(KEYS.chat(9).inbox) == 0


async def test_transient_failures_are_retried_then_given_up(bot: Bot) -> None:
    redis = fakeredis.FakeAsyncRedis()
    queue = RedisWorkQueue(redis=redis, keys=KEYS, lease_ms=1000)
    dispatcher = Dispatcher()
    tries: list[float] = []
    after = asyncio.Event()

    async def on_message(message: Message) -> None:
        if message.text == "telegram down":
            tries.append(asyncio.get_running_loop().time())
            raise TelegramNetworkError(method=SendMessage(chat_id=9, text="x"), message="unreachable")
        after.set()

    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot, max_attempts=1, give_up_seconds=0.5)
    await queue.enqueue(9, "u1", update_json(1, 9, "telegram down"), order=1)
    await queue.enqueue(9, "u2", update_json(2, 9, "after"), order=2)
    await run_until(worker, after)
    assert len(tries) >= 2, "transient failures do not count against WORKER_MAX_ATTEMPTS"
    letters = await RedisDeadLetters(redis=redis, keys=KEYS).list()
    assert [letter.item_id for letter in letters] == ["u1"] and "transient" in letters[0].error


async def test_a_given_up_update_s_final_steps_are_retried_until_all_are_done(bot: Bot) -> None:
    """The customer told, then the operators' ticket failed (Telegram unreachable): the next attempt
    makes the ticket without telling the customer again, and then nothing is repeated (review 26:
    with the customer marked told first, the ticket was never made)."""
    redis = fakeredis.FakeAsyncRedis()
    queue = RedisWorkQueue(redis=redis, keys=KEYS, lease_ms=5000)
    dispatcher = Dispatcher()
    after = asyncio.Event()
    calls: list[bool] = []

    async def on_message(message: Message) -> None:
        if message.text == "telegram down":
            raise TelegramNetworkError(method=SendMessage(chat_id=9, text="x"), message="unreachable")
        after.set()

    async def giving_up(
        chat_id: int, item: QueueItem, fence: Fence, told: bool, mark: Callable[[int], Awaitable[None]]
    ) -> None:
        calls.append(told)
        if not told:
            await mark(TOLD)
            raise TelegramNetworkError(method=SendMessage(chat_id=-100, text="ticket"), message="unreachable")
        await mark(FINISHED)

    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot, max_attempts=3, give_up_seconds=0.3, giving_up=giving_up)
    await queue.enqueue(9, "u1", update_json(1, 9, "telegram down"), order=1)
    await queue.enqueue(9, "u2", update_json(2, 9, "after"), order=2)
    await run_until(worker, after)
    assert calls == [False, True], "told once, the ticket retried once, then done"


class FailingChat:
    """Stands in for the chat service: raises what the test wants (the error router is real)."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    async def begin(self, *_args: object, **_kwargs: object) -> object:
        self.calls += 1
        raise self.error

    async def close(self) -> None:
        return None


async def run_with_error_router(
    telegram: StubTelegram, error: Exception, **options: Any
) -> tuple[FailingChat, list[DeadLetter]]:
    """One update through the real dispatcher (error router included) until it is dead-lettered."""
    redis = fakeredis.FakeAsyncRedis()
    queue = RedisWorkQueue(redis=redis, keys=KEYS, lease_ms=10_000)  # a starved worker keeps its lease
    chat = FailingChat(error)
    settings = BotSettings(_env_file=None, bot_token=TOKEN, telegram_api_url=telegram.base_url)  # type: ignore[call-arg]
    bot = build_bot(settings)
    dispatcher = build_dispatcher(chat, settings, backend=InMemoryBackend(), provider=ProviderWatch())  # type: ignore[arg-type]
    worker = make_worker(queue, dispatcher, bot, **options)
    dead = RedisDeadLetters(redis=redis, keys=KEYS)
    await queue.enqueue(9, "u1", update_json(1, 9, "help"), order=1)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(200):
            if letters := await dead.list():
                return chat, letters
            await asyncio.sleep(0.05)
        raise AssertionError("never dead-lettered")
    finally:
        worker.stop()
        await running
        await bot.session.close()


async def test_an_unexpected_error_is_retried_then_dead_lettered_and_the_customer_told(
    telegram: StubTelegram,
) -> None:
    """Regression: the error router answered every unexpected error and the update counted as done
    after one attempt: no retry, nothing for an operator to replay."""
    chat, letters = await run_with_error_router(telegram, KeyError("a bug"), max_attempts=2)
    assert chat.calls == 2 and letters[0].item_id == "u1" and "failed 2 times" in letters[0].error
    assert telegram.texts_to(9) == [TEXTS["en"]["internal_error"]], "told once, when it is given up"


async def test_an_unavailable_model_is_retried_and_the_customer_told_once(telegram: StubTelegram) -> None:
    chat, letters = await run_with_error_router(
        telegram, LLMUnavailableError("provider down"), max_attempts=1, give_up_seconds=0.6
    )
    assert chat.calls >= 2, "an LLM outage is transient: the question waits"
    assert "transient" in letters[0].error
    assert telegram.texts_to(9) == [TEXTS["en"]["llm_retrying"]]


async def test_reply_marks_left_to_the_worker_are_written_whatever_the_outcome(bot: Bot) -> None:
    """The engine leaves an answered turn's reply mark on the fence; the worker writes it with the
    update's acknowledgement, or with the failed attempt's record when the handler failed afterwards
    (else the retry would send the reply again)."""
    redis = fakeredis.FakeAsyncRedis()
    queue = RedisWorkQueue(redis=redis, keys=KEYS, lease_ms=5000)
    store = RedisSessionStore(redis=redis, keys=KEYS)
    dispatcher = Dispatcher()
    finished = asyncio.Event()
    attempts: list[str] = []

    async def on_message(message: Message, fence: Fence) -> None:
        assert fence.defer_reply_marks
        attempts.append(message.text or "")
        fence.deferred_replies.append(f"u{message.message_id}")
        if message.text == "fails after replying" and attempts.count(message.text) == 1:
            raise RuntimeError("crashed after the reply was sent")
        if message.text == "last":
            finished.set()

    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot)
    await queue.enqueue(9, "u1", update_json(1, 9, "fine"), order=1)
    await queue.enqueue(9, "u2", update_json(2, 9, "fails after replying"), order=2)
    await queue.enqueue(9, "u3", update_json(3, 9, "last"), order=3)
    await run_until(worker, finished)
    for turn in ("u1", "u2", "u3"):
        assert (await store.turn_status(9, turn)).replied, turn


async def test_a_handler_and_the_tasks_it_starts_see_their_chats_fence(bot: Bot) -> None:
    """The Bot API session checks CURRENT_FENCE right before a request is written
    (tests/unit/bot/telegram/test_fenced_session.py): the worker sets it for each item's work."""
    queue = RedisWorkQueue(redis=fakeredis.FakeAsyncRedis(), keys=KEYS, lease_ms=5000)
    dispatcher = Dispatcher()
    finished = asyncio.Event()
    seen: list[tuple[bool, bool]] = []

    async def fence_in_a_task() -> Fence | None:  # e.g. the typing indicator's task
        return CURRENT_FENCE.get()

    async def on_message(message: Message, fence: Fence) -> None:
        seen.append((CURRENT_FENCE.get() is fence, await asyncio.create_task(fence_in_a_task()) is fence))
        finished.set()

    dispatcher.message.register(on_message)
    await queue.enqueue(9, "u1", update_json(1, 9, "hello"), order=1)
    await run_until(make_worker(queue, dispatcher, bot), finished)
    assert seen == [(True, True)]
    assert CURRENT_FENCE.get() is None, "outside a chat's work there is no fence"


async def test_reply_marks_are_written_when_a_shutdown_cancels_the_acknowledgement(bot: Bot) -> None:
    """The marks stay on the fence until the acknowledgement is written: a shutdown that cancels the
    worker while the ack is in flight sets the item aside with them. (Regression: they were taken off
    the fence for the ack, so a cancelled ack lost them and the retry answered the turn again.)"""
    ack_started, ack_cancelled = asyncio.Event(), asyncio.Event()

    class StallingAck(RedisWorkQueue):
        """The acknowledgement of a done item never returns (a Redis call in flight at shutdown)."""

        async def next(
            self, claim: Claim, *, done: QueueItem | None = None, acquire: bool = False, replied: Sequence[str] = ()
        ) -> Step:
            if done is None:
                return await super().next(claim, acquire=acquire, replied=replied)
            ack_started.set()
            try:
                await asyncio.Event().wait()  # never set: only the shutdown's cancellation ends it
            except asyncio.CancelledError:
                ack_cancelled.set()
                raise
            raise AssertionError("unreachable")

    redis = fakeredis.FakeAsyncRedis()
    queue = StallingAck(redis=redis, keys=KEYS, lease_ms=5000)
    store = RedisSessionStore(redis=redis, keys=KEYS)

    async def on_message(message: Message, fence: Fence) -> None:
        assert fence.defer_reply_marks
        fence.deferred_replies.append(f"u{message.message_id}")  # the reply went out: the engine's mark

    dispatcher = Dispatcher()
    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot, grace=0.1)
    await queue.enqueue(9, "u1", update_json(1, 9, "answered"), order=1)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(ack_started.wait(), 60)  # handled; its ack in flight
    finally:
        worker.stop()  # the grace runs out with the ack still in flight: the chat's task is cancelled
        await asyncio.wait_for(running, 60)
    assert ack_cancelled.is_set(), "the shutdown cancelled the acknowledgement"
    assert await redis.zcard(KEYS.chat(9).inbox) == 1, "never acknowledged: the update will be served again"
    assert (await store.turn_status(9, "u1")).replied, "its retry must know the reply went out"
    assert await redis.exists(KEYS.chat(9).lease) == 0, "handed back"


async def test_a_reply_sent_before_the_lease_lapsed_is_recorded_when_the_turn_is_abandoned(bot: Bot) -> None:
    """Issue 36: the handler's reply went out, then its lease lapsed (Redis stalled; nobody else took
    the chat) and the turn is abandoned. The worker still writes the reply mark the engine left on the
    fence, so whoever serves the update next finds the turn answered and sends nothing again."""
    redis = fakeredis.FakeAsyncRedis()
    queue = RedisWorkQueue(redis=redis, keys=KEYS, lease_ms=5000)
    store = RedisSessionStore(redis=redis, keys=KEYS)
    served_again = asyncio.Event()
    replied_when_served_again: list[bool] = []

    async def on_message(message: Message, fence: Fence) -> None:
        if fence.token.endswith(":0"):  # the first claim: reply sent, then the lease lapses
            fence.deferred_replies.append(f"u{message.message_id}")
            await redis.delete(KEYS.chat(9).lease)
            raise LeaseLostError("the lease may have expired; nothing is sent")
        replied_when_served_again.append((await store.turn_status(9, "u1")).replied)
        served_again.set()

    dispatcher = Dispatcher()
    dispatcher.message.register(on_message)
    await queue.enqueue(9, "u1", update_json(1, 9, "answered, then the lease lapsed"), order=1)
    await run_until(make_worker(queue, dispatcher, bot), served_again)
    assert replied_when_served_again == [True], "the reply that went out was not recorded"


async def test_a_reply_under_way_when_the_lease_is_lost_finishes_and_is_recorded(bot: Bot) -> None:
    """Issue 36: the lease is lost (every renewal hangs; nobody else takes the chat) while the reply's
    request is under way (``Fence.in_flight``). The handler is not cancelled: its reply ends, its mark is
    kept, and the update served again finds the turn answered (the old heartbeat cancelled the request,
    nothing was recorded and the reply went out twice)."""
    redis = fakeredis.FakeAsyncRedis()
    queue = FlakyQueue(redis=redis, keys=KEYS, lease_ms=600)
    queue.slow_renew = 5.0  # every renewal hangs: the lease lapses
    store = RedisSessionStore(redis=redis, keys=KEYS)
    served_again = asyncio.Event()
    replied_when_served_again: list[bool] = []

    async def on_message(message: Message, fence: Fence) -> None:
        if fence.token.endswith(":0"):
            fence.in_flight += 1  # the reply is at Telegram, its answer on the way
            # the answer comes after the heartbeat gave the lease up and the lease ran out in Redis
            for _ in range(500):
                if fence.remaining() <= 0 and not await redis.exists(KEYS.chat(9).lease):
                    break
                await asyncio.sleep(0.02)
            fence.in_flight -= 1
            fence.deferred_replies.append(f"u{message.message_id}")
            return
        replied_when_served_again.append((await store.turn_status(9, "u1")).replied)
        served_again.set()

    dispatcher = Dispatcher()
    dispatcher.message.register(on_message)
    await queue.enqueue(9, "u1", update_json(1, 9, "answered while the lease was lost"), order=1)
    await run_until(make_worker(queue, dispatcher, bot, concurrency=1), served_again)
    assert replied_when_served_again == [True], "the reply under way was cancelled or not recorded"


async def test_after_claiming_the_last_due_chat_the_worker_waits_for_a_wake_up(bot: Bot) -> None:
    """No empty claim after the last due chat: the worker goes straight to waiting for a wake-up, and
    work marked due meanwhile wakes it."""

    claims: list[int | None] = []
    claimed = asyncio.Event()

    class CountingQueue(RedisWorkQueue):
        async def claim(self, token: str) -> Claim | None:
            claim = await super().claim(token)
            claims.append(claim.chat_id if claim else None)
            claimed.set()
            return claim

    queue = CountingQueue(redis=fakeredis.FakeAsyncRedis(), keys=KEYS, lease_ms=5000)
    served = {"first": asyncio.Event(), "second": asyncio.Event()}

    async def on_message(message: Message) -> None:
        served[message.text or ""].set()

    dispatcher = Dispatcher()
    dispatcher.message.register(on_message)
    worker = make_worker(queue, dispatcher, bot, idle_wait=2)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(claimed.wait(), 60)  # found nothing: waits
        await queue.enqueue(9, "u1", update_json(1, 9, "first"), order=1)
        await asyncio.wait_for(served["first"].wait(), 60)
        await queue.enqueue(8, "u2", update_json(2, 8, "second"), order=2)
        await asyncio.wait_for(served["second"].wait(), 60)
    finally:
        worker.stop()
        await running
    assert claims[:3] == [None, 9, 8], "no claim in between found nothing"


async def test_a_webhook_worker_serves_the_chats_it_receives_and_queues_the_rest(bot: Bot) -> None:
    """With room, the receiving worker takes the chat at intake (no claim); a chat it cannot take now
    (held, or no slot free) is queued and served through a claim, in order."""
    claims: list[int | None] = []

    class CountingQueue(RedisWorkQueue):
        async def claim(self, token: str) -> Claim | None:
            claim = await super().claim(token)
            claims.append(claim.chat_id if claim else None)
            return claim

    redis = fakeredis.FakeAsyncRedis()
    seen: list[str] = []
    release = asyncio.Event()
    served = {text: asyncio.Event() for text in ("slow", "after slow", "other chat", "idle again")}
    idle = False
    waits = 0

    class Counted(CountingQueue):
        async def wait_for_work(self, seconds: float) -> None:
            nonlocal idle, waits
            idle, waits = True, waits + 1
            try:
                await super().wait_for_work(seconds)
            finally:
                idle = False

    queue = Counted(redis=redis, keys=KEYS, lease_ms=5000)

    async def until_idle() -> None:
        # waiting for a wake-up with its slot free, and still in the same wait 10 ms later: a wake-up
        # left over from earlier updates ends a wait at once and the loop claims (holding the slot),
        # and with a short idle_wait it would claim every few ms; an update arriving then is rightly
        # queued instead of taken
        seen_wait = -1
        for _ in range(500):
            if idle and worker.has_room():
                if seen_wait == waits:
                    return
                seen_wait = waits
            else:
                seen_wait = -1
            await asyncio.sleep(0.01)
        raise AssertionError("the worker never went idle")

    async def on_message(message: Message) -> None:
        seen.append(message.text or "")
        if message.text == "slow":
            await release.wait()
        served[message.text or ""].set()

    dispatcher = Dispatcher()
    dispatcher.message.register(on_message)
    # it wakes only when a chat is marked due: idle, its slot stays free
    worker = make_worker(queue, dispatcher, bot, concurrency=1, idle_wait=60)
    intake = Intake(queue=queue, dead_letters=RedisDeadLetters(redis=redis, keys=KEYS), identity="w1", serve=worker)
    running = asyncio.create_task(worker.run())
    try:
        await until_idle()  # running, found nothing
        await intake.take(update(1, 9, "slow"))  # taken at intake: the one slot is busy now
        await intake.take(update(2, 9, "after slow"))  # its chat is held: queued behind it
        await intake.take(update(3, 8, "other chat"))  # no slot: queued, due
        assert seen == ["slow"]
        release.set()
        for text in ("after slow", "other chat"):
            await asyncio.wait_for(served[text].wait(), 60)
        await until_idle()  # the slot is free again
        await intake.take(update(4, 7, "idle again"))
        await asyncio.wait_for(served["idle again"].wait(), 60)
    finally:
        release.set()  # a failed assertion must not leave the slow turn holding the only slot
        worker.stop()
        await redis.rpush(KEYS.wake, "stop")  # out of its wait for a wake-up
        await running
    assert seen.index("slow") < seen.index("after slow")
    assert set(seen) == {"slow", "after slow", "other chat", "idle again"}
    assert 7 not in claims, "a chat taken at intake is never claimed"
    assert 8 in claims, "the chat queued for want of a slot is claimed"


async def test_a_turn_abandoned_after_a_429_keeps_the_providers_wait_for_the_next_holder(bot: Bot) -> None:
    """Under load the lease lapses while the model answers 429 (Retry-After 1 s): the handler's notice
    finds its fence expired (LeaseLostError, raised while handling the 429) and the turn is abandoned,
    nobody else holding the chat. The wait goes on the item, so the next holder (any worker, whose
    process never saw the 429) does not ask the model again sooner (it asked at once before)."""
    redis = fakeredis.FakeAsyncRedis()
    queue = RedisWorkQueue(redis=redis, keys=KEYS, lease_ms=5000)
    served_again = asyncio.Event()
    times: list[float] = []

    async def on_message(message: Message, fence: Fence) -> None:
        times.append(asyncio.get_running_loop().time())
        if len(times) > 1:
            served_again.set()
            return
        try:
            raise LLMUnavailableError("LLM provider answered HTTP 429", status=429, retry_after=1.0)
        except LLMUnavailableError:
            await redis.delete(KEYS.chat(9).lease)  # the lease lapsed meanwhile
            raise LeaseLostError("the lease may have expired; nothing is sent")  # noqa: B904

    dispatcher = Dispatcher()
    dispatcher.message.register(on_message)
    await queue.enqueue(9, "u1", update_json(1, 9, "asked while the provider says wait"), order=1)
    await run_until(make_worker(queue, dispatcher, bot), served_again)
    assert times[1] - times[0] >= 0.95, f"asked again {times[1] - times[0]:.2f}s after a 429 asking 1s"
