"""Keeping a chat's lease while the worker serves it: the heartbeat renews the lease every third of it,
inside what is left of it; the moment it cannot be kept, the fence's deadline moves to the past (nothing
more is written) and the chat's handler is cancelled.

A request to the customer already under way (``Fence.in_flight``) is not cut off: it may be delivered,
and a cancelled one is never recorded, so the next holder would send the reply again. The handler is
cancelled only if still running ``IN_FLIGHT_GRACE`` seconds later; a reply it finishes is recorded
unless another worker took the chat (the queue's ``nobody_else_holds`` rule)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from services.core.errors import TransientError
from services.core.fence import Fence
from services.core.retry import RequestBudget
from services.ports.queue import Claim, QueueItem, WorkQueue

log = logging.getLogger(__name__)

IN_FLIGHT_GRACE = 15.0
"""Seconds a handler whose lease was lost may go on while a request to the customer is under way
(Telegram answers in well under a second; one still unanswered by then is cancelled)."""


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


def lose_lease(serving: Serving, why: str, grace: float = IN_FLIGHT_GRACE) -> None:
    """The chat is no longer ours: close the fence and cancel its handler, at once unless a request to
    the customer is under way (then within ``grace`` seconds, if it has not ended by then)."""
    serving.lost.set()
    serving.fence.valid_until = 0.0
    work = serving.work
    if work is None or not serving.fence.in_flight:
        log.warning("chat %s: lease lost (%s); cancelling its update", serving.claim.chat_id, why)
        if work is not None:
            work.cancel()
        return
    log.warning(
        "chat %s: lease lost (%s); its request to Telegram under way may finish (up to %.0fs), nothing more is sent",
        serving.claim.chat_id,
        why,
        grace,
    )
    asyncio.get_running_loop().call_later(grace, work.cancel)
