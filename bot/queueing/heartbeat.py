"""Keeping a chat's lease while the worker serves it: the heartbeat renews the lease every third of it,
each renewal landing inside what is left of the lease, and the moment the lease cannot be kept it
cancels the chat's handler and moves the fence's deadline to the past, so nothing more is written."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from services.engine.retry import RequestBudget
from services.errors import TransientError
from services.fence import Fence
from services.ports.queue import Claim, QueueItem, WorkQueue

log = logging.getLogger(__name__)


@dataclass
class Serving:
    """One chat being served: its fence and the handler task the heartbeat may have to cancel."""

    claim: Claim
    fence: Fence
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    work: asyncio.Task[None] | None = None
    item: QueueItem | None = None
    """The item taken from the inbox and not yet finished."""
    failure: BaseException | None = None
    """How the last attempt failed (its Retry-After goes on the item's record)."""
    budget: RequestBudget | None = None
    """The model requests of the current attempt (they go on the item's record when it fails)."""


def start_heartbeat(serving: Serving, queue: WorkQueue, lease: float) -> asyncio.Task[None]:
    """The task that keeps ``serving``'s lease (``lease`` seconds long) until ``serving.done`` is set;
    a heartbeat that crashes loses the lease (nothing renews it any more)."""
    heartbeat = asyncio.create_task(keep_lease(serving, queue, lease), name=f"heartbeat-{serving.claim.chat_id}")
    heartbeat.add_done_callback(lambda task: _heartbeat_ended(task, serving))
    return heartbeat


async def keep_lease(serving: Serving, queue: WorkQueue, lease: float) -> None:
    """Renew the lease every third of it; each renewal must land inside what is left of the lease
    (retried at once on failure). When the lease cannot be kept the handler is cancelled."""
    claim, fence = serving.claim, serving.fence
    while not serving.done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(serving.done.wait(), lease / 3)
        while not serving.done.is_set():
            remaining = fence.remaining()
            if remaining <= 0:
                lose_lease(serving, "could not renew it in time")
                return
            sent = time.monotonic()
            try:
                kept = await asyncio.wait_for(queue.renew(claim), timeout=remaining)
            except (TransientError, TimeoutError) as exc:
                log.warning("chat %s: lease renewal failed (%s); retrying", claim.chat_id, type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(serving.done.wait(), min(0.05, max(fence.remaining(), 0)))
                continue
            if not kept:
                lose_lease(serving, "another worker holds it")
                return
            fence.valid_until = sent + lease
            break


def _heartbeat_ended(task: asyncio.Task[None], serving: Serving) -> None:
    if task.cancelled() or task.exception() is None:
        return
    log.error("chat %s: heartbeat crashed", serving.claim.chat_id, exc_info=task.exception())
    lose_lease(serving, "its heartbeat crashed")  # nothing renews the lease any more


def lose_lease(serving: Serving, why: str) -> None:
    """The chat is no longer ours: cancel its handler and close the fence."""
    log.warning("chat %s: lease lost (%s); cancelling its update", serving.claim.chat_id, why)
    serving.lost.set()
    serving.fence.valid_until = 0.0
    if serving.work is not None:
        serving.work.cancel()
