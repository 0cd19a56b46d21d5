"""Queue worker: claims chats from Redis and feeds their updates, in order, to the aiogram Dispatcher."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time

from aiogram import Bot, Dispatcher
from aiogram.types import Update
from redis.exceptions import RedisError

from bot.handlers.errors import TRANSIENT_ERRORS
from services.errors import StoreError
from services.metrics import QUEUE_WAIT
from services.queue import ChatWorkQueue, Claim, QueueItem

log = logging.getLogger(__name__)

MAX_BACKOFF = 30.0


class Worker:
    """Serves up to ``concurrency`` chats at once; one update of a chat at a time, in arrival order."""

    def __init__(
        self,
        *,
        queue: ChatWorkQueue,
        dispatcher: Dispatcher,
        bot: Bot,
        identity: str,
        concurrency: int,
        idle_wait: float,
        grace: float,
    ) -> None:
        self._queue = queue
        self._dispatcher = dispatcher
        self._bot = bot
        self.identity = identity
        self._concurrency = concurrency
        self._idle_wait = idle_wait
        self._grace = grace
        self._stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._tokens = itertools.count()
        self.alive = False
        self.processed = 0
        self.retried = 0

    def stop(self) -> None:
        """Stop taking work; in-flight chats finish their current update, then are handed back."""
        self._stopping.set()

    async def run(self) -> None:
        slots = asyncio.Semaphore(self._concurrency)
        backoff = 0.1
        self.alive = True
        try:
            while not self._stopping.is_set():
                await slots.acquire()
                try:
                    claim = await self._queue.claim(f"{self.identity}:{next(self._tokens)}")
                except (RedisError, StoreError) as exc:
                    slots.release()
                    log.warning("queue unreachable (%s); retrying in %.1fs", type(exc).__name__, backoff)
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
                    continue
                backoff = 0.1
                if claim is None:
                    slots.release()
                    await self._wait_for_work()
                    continue
                task = asyncio.create_task(self._serve(claim))
                self._tasks.add(task)

                def finished(done: asyncio.Task[None]) -> None:
                    self._tasks.discard(done)
                    slots.release()

                task.add_done_callback(finished)
        finally:
            await self._drain()
            self.alive = False

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _wait_for_work(self) -> None:
        try:
            await self._queue.wait_for_work(self._idle_wait)
        except (RedisError, StoreError):
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

    async def _serve(self, claim: Claim) -> None:
        lost, done = asyncio.Event(), asyncio.Event()
        heartbeat = asyncio.create_task(self._heartbeat(claim, lost, done))
        backoff = 0.2
        try:
            while not lost.is_set():
                if self._stopping.is_set():
                    await self._queue.hand_back(claim)
                    return
                item = await self._queue.head(claim)
                if item is None:
                    if await self._queue.release(claim):
                        return
                    continue
                if not await self._process(item):
                    self.retried += 1
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
                    continue
                backoff = 0.2
                self.processed += 1
                if not await self._queue.ack(claim, item.id):
                    log.warning("chat %s: lease lost before ack; another worker redoes it", claim.chat_id)
                    return
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._queue.hand_back(claim))
            raise
        except (RedisError, StoreError) as exc:
            # the lease expires by itself and the chat's watchdog brings it back
            log.warning("chat %s: queue unreachable (%s); leaving it to the lease", claim.chat_id, exc)
        finally:
            # The event, not only cancel(): a cancellation that lands inside a Redis call can be
            # swallowed by the client, and a heartbeat that outlives its chat would hold it forever.
            done.set()
            heartbeat.cancel()

    async def _heartbeat(self, claim: Claim, lost: asyncio.Event, done: asyncio.Event) -> None:
        interval = self._queue.lease_ms / 3000
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), interval)
            if done.is_set():
                return
            try:
                if not await self._queue.renew(claim):
                    log.warning("chat %s: lease lost", claim.chat_id)
                    lost.set()
                    return
            except (RedisError, StoreError) as exc:
                log.warning("chat %s: cannot renew lease (%s)", claim.chat_id, type(exc).__name__)

    async def _process(self, item: QueueItem) -> bool:
        """Feed one update to the dispatcher. False means: transient failure, retry it later."""
        try:
            update = Update.model_validate_json(item.payload, context={"bot": self._bot})
        except ValueError:
            log.error("dropping unreadable queued item %s", item.id)
            return True
        if item.enqueued_ms:
            QUEUE_WAIT.observe(max(0.0, time.time() - item.enqueued_ms / 1000))
        try:
            await self._dispatcher.feed_update(self._bot, update, queued=True)
        except TRANSIENT_ERRORS as exc:
            log.warning("update %s will be retried: %s: %s", update.update_id, type(exc).__name__, exc)
            return False
        except Exception:
            log.exception("update %s failed; dropped", update.update_id)
        return True
