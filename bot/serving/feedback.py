"""The feedback schedule, watched by every worker: a chat whose question is due is claimed (exactly one
worker wins; its hold expires, so a worker that dies leaves it to another) and handed over, as the
handoff deadlines are (``deadlines.py``): queued into the chat's inbox in queued mode (asked under the
chat's lease, in order with its messages), asked at once in-process. Whether it is still due is
decided when it is asked, on the chat's own record."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bot.metrics import ERRORS
from bot.serving.deadlines import LAST_ORDER
from services.core.errors import TransientError
from services.ports.quality import ConversationLog
from services.ports.queue import WorkQueue

log = logging.getLogger(__name__)

FEEDBACK_PREFIX = "internal:feedback:"


async def watch_feedback(
    conversations: ConversationLog, act: Callable[[int, int], Awaitable[None]], *, hold: float, every: float = 1.0
) -> None:
    """Every ``every`` seconds: each due chat claimed for ``hold`` seconds, ``act(chat, due_ms)`` on it,
    then released (a failure keeps the hold: tried again once it expires)."""
    while True:
        try:
            due = await conversations.due()
        except TransientError as exc:
            log.warning("feedback schedule: %s", exc)
            due = []
        for chat_id, due_ms in due:
            try:
                claim = await conversations.claim(chat_id, due_ms, hold_seconds=hold)
                if claim is None:
                    continue  # another worker has it
                await act(chat_id, due_ms)
                await conversations.release(chat_id, claim)
            except Exception as exc:  # one chat's failure must not stop the others
                ERRORS.labels(type(exc).__name__).inc()
                log.warning("feedback schedule: chat %s not handled (tried again): %s", chat_id, exc, exc_info=exc)
        await asyncio.sleep(every)


def enqueue_feedback(queue: WorkQueue) -> Callable[[int, int], Awaitable[None]]:
    """Queued mode: one durable item per due time (``internal:feedback:<chat>:<due ms>``, the same id
    from every worker that claims that entry: the queue takes it in once)."""

    async def act(chat_id: int, due_ms: int) -> None:
        await queue.enqueue(chat_id, f"{FEEDBACK_PREFIX}{chat_id}:{due_ms}", "{}", order=LAST_ORDER)

    return act
