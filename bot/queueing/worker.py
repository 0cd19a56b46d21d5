"""Queue worker: claims chats from Redis and feeds their updates, in order, to the aiogram Dispatcher.

Every update is processed under the chat's lease with a fencing token (``services.core.fence``): the
heartbeat (``heartbeat``) renews the lease and cancels the handler the moment it cannot be kept, and
Redis refuses every write once another worker owns the chat. A failed update is retried as
``retrying.AttemptRules`` says, then goes to the dead letters, so no update is retried forever and no
chat waits forever; a customer who was promised an answer is then told it could not be given
(``giving_up``, exactly once).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Literal

from aiogram import Bot, Dispatcher
from aiogram.types import Update

from bot.metrics import DEAD_LETTERS, LEASES_LOST, QUEUE_WAIT
from bot.queueing.heartbeat import Serving, start_heartbeat
from bot.queueing.retrying import MAX_BACKOFF, AttemptRules, GiveUpReason, Outcome
from bot.serving.failures import is_transient
from services.core.errors import LeaseLostError, TransientError
from services.core.fence import CURRENT_FENCE, Fence
from services.core.retry import REQUEST_BUDGET, RequestBudget
from services.ports.deadletters import DeadLetters
from services.ports.queue import DEAD_LETTERED, FINISHED, TOLD, Claim, QueueItem, Step, WorkQueue

log = logging.getLogger(__name__)

INTERNAL_PREFIX = "internal:"
"""Items the bot queues for itself (``internal:<kind>:...``, e.g. a handoff's reply deadline passed):
handled by the worker's ``internal`` hook under the chat's lease, never fed to the dispatcher (no
Telegram update can carry such an id: theirs are ``u<update id>``)."""
Internal = Callable[[int, str, Fence], Coroutine[Any, Any, None]]
"""(chat id, item id, fence) → handles one internal item."""
GiveUp = Callable[[int, QueueItem, Fence, bool, Callable[[int], Coroutine[Any, Any, None]]], Coroutine[Any, Any, None]]
"""(chat id, item, fence, told already, mark) → tells the customer their update was given up and the
operators too, calling ``mark(TOLD)`` and ``mark(FINISHED)`` as each is done; bot.queueing.giving_up."""


def worker_identity() -> str:
    """Who this worker is, in leases, logs and dead letters: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Serves up to ``concurrency`` chats at once; one update of a chat at a time, in arrival order."""

    def __init__(
        self,
        *,
        queue: WorkQueue,
        dead_letters: DeadLetters,
        dispatcher: Dispatcher,
        bot: Bot,
        identity: str,
        concurrency: int,
        idle_wait: float,
        grace: float,
        max_attempts: int = 3,
        give_up_seconds: float = 600.0,
        internal: Internal | None = None,
        giving_up: GiveUp | None = None,
        max_model_requests: int = 10,
        download_give_up_seconds: float = 60.0,
    ) -> None:
        self._internal = internal
        self._giving_up = giving_up
        self._queue = queue
        self._dead = dead_letters
        self._dispatcher = dispatcher
        self._bot = bot
        self.identity = identity
        self._concurrency = concurrency
        self._idle_wait = idle_wait
        self._grace = grace
        self._retrying = AttemptRules(max_attempts, give_up_seconds, max_model_requests, download_give_up_seconds)
        self._lease = queue.lease_ms / 1000
        # nothing is sent in the last part of a lease: room for one request and some clock skew
        self._margin = min(1.0, self._lease / 5)
        self._stopping = asyncio.Event()
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._tokens = itertools.count()
        self.alive = False
        self.processed = 0
        self.retried = 0

    def stop(self) -> None:
        """Stop taking work; in-flight chats finish their current update, then are handed back."""
        self._stopping.set()

    def new_token(self) -> str:
        """A lease token for one claim of this worker."""
        return f"{self.identity}:{next(self._tokens)}"

    def has_room(self) -> bool:
        """Whether ``adopt`` would take a chat now (running, not stopping, a slot free)."""
        return self.alive and not self._stopping.is_set() and not self._slots.locked()

    async def adopt(self, claim: Claim, step: Step, *, sent: float) -> bool:
        """Serve a chat whose lease the caller took for this worker (the webhook intake, for the chat of
        an update it just received). ``sent``: when the request that took the lease was sent. False if
        there is no room after all: the caller hands the chat back."""
        if not self.has_room():
            return False
        await self._slots.acquire()  # a free slot: taken without waiting
        self._start_serving(claim, step, sent)
        return True

    async def run(self) -> None:
        backoff = 0.1
        self.alive = True
        try:
            while not self._stopping.is_set():
                await self._slots.acquire()
                try:
                    claim = await self._queue.claim(self.new_token())
                except TransientError as exc:
                    self._slots.release()
                    log.warning("queue unreachable (%s); retrying in %.1fs", exc, backoff)
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
                    continue
                except BaseException:
                    self._slots.release()  # the slots outlive this loop (the supervisor restarts it)
                    raise
                backoff = 0.1
                if claim is None:
                    self._slots.release()
                    await self._wait_for_work()
                    continue
                self._start_serving(claim)
                if not claim.others_due:
                    # nothing else was due: wait for a wake-up (a chat marked due meanwhile left one)
                    # rather than ask again and find nothing; but only with a slot free, so that a wake-up
                    # is never taken by a worker that cannot serve it while an idle one sleeps
                    await self._slots.acquire()
                    self._slots.release()
                    await self._wait_for_work()
        finally:
            await self._drain()
            self.alive = False

    def _start_serving(self, claim: Claim, step: Step | None = None, sent: float | None = None) -> None:
        """Serve ``claim`` in a task of its own, holding one slot until it ends."""
        task = asyncio.create_task(self._serve(claim, step, sent), name=f"chat-{claim.chat_id}")
        self._tasks.add(task)

        def finished(done: asyncio.Task[None]) -> None:
            self._tasks.discard(done)
            self._slots.release()
            if not done.cancelled() and done.exception() is not None:
                log.error("chat task failed", exc_info=done.exception())

        task.add_done_callback(finished)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _wait_for_work(self) -> None:
        try:
            await self._queue.wait_for_work(self._idle_wait)
        except TransientError:
            await self._sleep(self._idle_wait)

    async def _drain(self) -> None:
        if not self._tasks:
            return
        log.info("stopping: waiting up to %.0fs for %d chat(s) in progress", self._grace, len(self._tasks))
        _, pending = await asyncio.wait(set(self._tasks), timeout=self._grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _serve(self, claim: Claim, step: Step | None = None, sent: float | None = None) -> None:
        """Take the chat's lease (unless ``step`` says it was taken, at ``sent``) and serve its inbox."""
        if step is None or sent is None:
            sent = time.monotonic()
            try:
                step = await self._queue.next(claim, acquire=True)
            except TransientError as exc:
                log.warning("chat %s: cannot take the lease (%s)", claim.chat_id, exc)
                return
        if step.kind not in ("item", "released"):
            return  # busy: another worker holds it
        fence = Fence(claim.token, valid_until=sent + self._lease, margin=self._margin, defer_reply_marks=True)
        serving = Serving(claim, fence)
        heartbeat = start_heartbeat(serving, self._queue, self._lease)
        try:
            await self._serve_items(serving, step)
        except asyncio.CancelledError:
            if serving.work is not None:
                serving.work.cancel()
            with contextlib.suppress(Exception):
                await asyncio.shield(self._set_aside(serving))
            raise
        except TransientError as exc:
            # the lease expires by itself and the chat's watchdog brings it back
            log.warning("chat %s: queue unreachable (%s); leaving it to the lease", claim.chat_id, exc)
            if serving.item is not None:
                await self._keep_reply_marks(serving, serving.item)
        finally:
            # The event, not only cancel(): a cancellation that lands inside a Redis call can be
            # swallowed by the client, and a heartbeat that outlives its chat would hold it forever.
            serving.done.set()
            heartbeat.cancel()

    async def _serve_items(self, serving: Serving, step: Step) -> None:
        claim = serving.claim
        while step.kind == "item":
            assert step.item is not None
            item = serving.item = step.item
            if self._stopping.is_set() or serving.lost.is_set():
                await self._set_aside(serving)
                return
            if item.retry_in > 0 and (item.given_up or self._retrying.give_up_reason(item) is None):
                if item.retry_in > self._lease / 3:  # a long wait: the chat goes back, due at that time
                    await self._queue.note(claim, item, "set_aside")
                    serving.item = None
                    await self._queue.defer(claim, item.retry_in)
                    return
                await self._sleep(item.retry_in)
                if self._stopping.is_set():
                    await self._set_aside(serving)
                    return
            outcome = await self._attempt(serving, item)
            if outcome == "abandon":
                LEASES_LOST.inc()
                log.warning("chat %s: lease lost during update %s; the turn is abandoned", claim.chat_id, item.id)
                await self._keep_reply_marks(serving, item, retry_in=self._retrying.provider_wait(serving.failure))
                with contextlib.suppress(TransientError):
                    await self._queue.hand_back(claim)
                return
            if outcome == "done":
                self.processed += 1
                # the marks stay on the fence until the ack is written: a shutdown that cancels it sets
                # the item aside with them
                step = await self._queue.next(claim, done=item, replied=serving.fence.deferred_replies)
                serving.fence.take_deferred_replies()
                serving.item = None
                continue
            self.retried += 1
            # a handler that failed after its reply went out: the mark goes with the attempt's record (and
            # stays on the fence until it is written, as for the acknowledgement)
            replied = tuple(serving.fence.deferred_replies)
            made = serving.budget.made if serving.budget is not None else 0
            requests, retry_in = self._retrying.next_try(item, outcome, serving.failure, requests_made=made)
            serving.failure = serving.budget = None
            kind: Literal["transient", "failed"] = "transient" if outcome == "transient" else "failed"
            await self._queue.note(claim, item, kind, replied=replied, model_requests=requests, retry_in=retry_in)
            serving.fence.take_deferred_replies()
            step = await self._queue.next(claim)
        if step.kind == "lost":
            LEASES_LOST.inc()
            log.warning("chat %s: lease lost between updates; another worker goes on", claim.chat_id)

    async def _attempt(self, serving: Serving, item: QueueItem) -> Outcome:
        """Process one update once. The outcome says what to do with it next."""
        if item.given_up:  # dead-lettered already: only the customer's final message is left to send
            if item.given_up >= FINISHED or item.failures >= self._retrying.max_attempts:
                if item.given_up < FINISHED:
                    log.error(
                        "chat %s: could not finish telling that %s was given up (%s)",
                        serving.claim.chat_id,
                        item.id,
                        "customer told, no ticket" if item.given_up >= TOLD else "customer not told",
                    )
                return "done"
            return await self._tell_given_up(serving, item)
        give_up = self._retrying.give_up_reason(item)
        if give_up is not None:
            return await self._dead_letter(serving, item, give_up)
        if item.id.startswith(INTERNAL_PREFIX):
            if self._internal is None:
                return await self._dead_letter(serving, item, ("internal item and no handler for it", False))
            serving.work = _fenced_task(self._internal(serving.claim.chat_id, item.id, serving.fence), serving.fence)
            return await self._outcome(serving, item.id)
        try:
            update = Update.model_validate(_parse(item.payload), context={"bot": self._bot})
        except ValueError as exc:
            return await self._dead_letter(serving, item, (f"unreadable update: {exc}", False))
        if item.enqueued_ms and item.started == 1:
            QUEUE_WAIT.observe(max(0.0, time.time() - item.enqueued_ms / 1000))
        serving.budget = RequestBudget(cap=max(1, self._retrying.max_model_requests - item.model_requests))
        serving.work = _fenced_task(
            self._dispatcher.feed_update(
                self._bot,
                update,
                queued=True,
                fence=serving.fence,
                transient_failures=item.transient_failures,
                attempt=item.started,
                final_attempt=self._retrying.is_final_attempt(item),
                last_download_attempt=self._retrying.is_last_download_attempt(item),
            ),
            serving.fence,
            request_budget=serving.budget,
        )
        return await self._outcome(serving, f"update {update.update_id}", item.started)

    async def _outcome(self, serving: Serving, what: str, started: int = 1) -> Outcome:
        """Wait for the item's work task and classify how it ended."""
        assert serving.work is not None
        try:
            await asyncio.wait({serving.work})
        finally:
            if not serving.work.done():  # this chat's task was cancelled (shutdown): so is the handler
                serving.work.cancel()
        work, serving.work = serving.work, None
        if work.cancelled():
            return "abandon" if serving.lost.is_set() else "retry"
        failure = work.exception()
        if failure is None:
            return "done"
        serving.failure = failure
        if isinstance(failure, LeaseLostError):
            serving.lost.set()
            return "abandon"
        if is_transient(failure):
            log.warning("%s will be retried: %s: %s", what, type(failure).__name__, failure)
            return "transient"
        log.error("%s failed (attempt %d)", what, started, exc_info=failure)
        return "retry"

    async def _keep_reply_marks(self, serving: Serving, item: QueueItem, *, retry_in: float = 0.0) -> None:
        """Record the replies that went out under a lease this worker lost or could not confirm, and the
        provider's ``retry_in`` (Retry-After) its attempt was told, tried for up to one lease: the queue
        takes them unless another worker holds the chat (scripts' ``nobody_else_holds``), so the next
        holder neither sends them again nor asks the model sooner. The item is left to the next holder."""
        replied = serving.fence.take_deferred_replies()
        deadline = time.monotonic() + self._lease
        while replied or retry_in > 0:
            try:
                await self._queue.note(serving.claim, item, "set_aside", replied=replied, retry_in=retry_in)
                return
            except TransientError as exc:
                if time.monotonic() >= deadline or self._stopping.is_set():
                    log.warning("chat %s: replies %s sent but not recorded (%s)", serving.claim.chat_id, replied, exc)
                    return
                await self._sleep(min(0.5, self._lease / 10))

    async def _set_aside(self, serving: Serving) -> None:
        """Give the chat back with its current item unfinished (stopping): not counted as a failure."""
        if serving.item is not None and not serving.lost.is_set():
            replied = serving.fence.take_deferred_replies()
            with contextlib.suppress(TransientError):
                await self._queue.note(serving.claim, serving.item, "set_aside", replied=replied)
        await self._queue.hand_back(serving.claim)

    async def _dead_letter(self, serving: Serving, item: QueueItem, give_up: GiveUpReason) -> Outcome:
        """Keep the update for an operator, tell its customer (``giving_up``), and move on (``next``
        acknowledges it)."""
        reason, tell = give_up
        claim = serving.claim
        if serving.fence.remaining() <= 0:  # the chat may be someone else's (and /forget may have run)
            serving.lost.set()
            return "abandon"
        await self._dead.add(
            chat_id=claim.chat_id,
            item_id=item.id,
            order=item.order,
            payload=item.payload,
            error=reason,
            attempts=item.started,
            worker=self.identity,
        )
        DEAD_LETTERS.labels("failed").inc()
        log.error("chat %s: update %s moved to the dead letters: %s", claim.chat_id, item.id, reason)
        if not tell or self._giving_up is None or item.id.startswith(INTERNAL_PREFIX):
            return "done"
        await self._queue.given_up(claim, item, DEAD_LETTERED)
        return await self._tell_given_up(serving, item)

    async def _tell_given_up(self, serving: Serving, item: QueueItem) -> Outcome:
        """The customer's final message (retried like any attempt when it cannot be sent now)."""
        assert self._giving_up is not None
        claim = serving.claim

        async def mark(stage: int) -> None:
            await self._queue.given_up(claim, item, stage)

        work = self._giving_up(claim.chat_id, item, serving.fence, item.given_up >= TOLD, mark)
        serving.work = _fenced_task(work, serving.fence)
        return await self._outcome(serving, f"the final message for {item.id}", item.started)


def _parse(payload: str) -> object:
    # json, not pydantic's parser: the stdlib accepts lone surrogates ("\ud800"), which Telegram sends
    return json.loads(payload)


def _fenced_task(
    work: Coroutine[Any, Any, Any], fence: Fence, *, request_budget: RequestBudget | None = None
) -> asyncio.Task[Any]:
    """A task for one item of a chat: it, and every task it starts, sees the chat's fence as
    CURRENT_FENCE (the Bot API session checks it right before a request is written) and the model
    requests its question may still make as REQUEST_BUDGET (LLM_MAX_REQUESTS_PER_QUESTION)."""
    context = contextvars.copy_context()
    context.run(CURRENT_FENCE.set, fence)
    context.run(REQUEST_BUDGET.set, request_budget)
    return asyncio.create_task(work, context=context)
