"""Handoff reply deadlines: finds handoffs no operator answered in time and has them handled."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from bot.metrics import ERRORS
from services.core.errors import TransientError
from services.ports.handoffs import HandoffStore
from services.ports.queue import WorkQueue

log = logging.getLogger(__name__)

OVERDUE_PREFIX = "internal:handoff-overdue:"
LAST_ORDER = 2**52
"""Queue order of an internal item: after every update already in the chat's inbox."""


async def watch_deadlines(handoffs: HandoffStore, act: Callable[[int], Awaitable[None]], every: float = 1.0) -> None:
    """Every ``every`` seconds, ``act`` on each chat whose handoff deadline passed, then remove the
    deadline (only the deadline: the open set belongs to the start and the end of a handoff). A crash
    in between acts again: the handling is idempotent. A chat whose handling fails is logged and
    counted, keeps its deadline (tried again next round) and stops no other chat."""
    while True:
        try:
            due = await handoffs.due()
        except TransientError as exc:
            log.warning("handoff deadlines: %s", exc)
            due = []
        for chat_id in due:
            try:
                await act(chat_id)
                await handoffs.track(chat_id, open=None, reply_within=None)
            except Exception as exc:  # one chat's failure must not stop the others
                ERRORS.labels(type(exc).__name__).inc()
                log.warning("handoff deadlines: chat %s not handled (tried again): %s", chat_id, exc, exc_info=exc)
        await asyncio.sleep(every)


def enqueue_overdue(queue: WorkQueue) -> Callable[[int], Awaitable[None]]:
    """Queued mode: the overdue handoff is handled by whichever worker serves the chat, under its lease."""

    async def act(chat_id: int) -> None:
        item_id = f"{OVERDUE_PREFIX}{chat_id}:{time.time_ns()}"
        await queue.enqueue(chat_id, item_id, "{}", order=LAST_ORDER)

    return act
