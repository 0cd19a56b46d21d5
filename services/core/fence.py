"""The fencing token a queue worker carries while it serves a chat."""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field

from services.core.errors import LeaseLostError


@dataclass(slots=True)
class Fence:
    """Proof that a worker holds a chat's lease.

    ``token`` goes into every per-chat write, where Redis checks it inside the same script (the write is
    refused once another worker took the chat). ``valid_until`` (``time.monotonic()``) is the latest
    moment the lease is known to last, kept by the heartbeat from the time each renewal was *sent*;
    nothing is sent to the customer after it (minus ``margin``), so a worker paused past its lease
    cannot answer twice.
    """

    token: str
    valid_until: float
    margin: float = 0.0
    defer_reply_marks: bool = False
    """Set by a queue worker that writes ``deferred_replies`` together with the update's
    acknowledgement (or its failed attempt's record): one script per turn instead of two."""
    deferred_replies: list[str] = field(default_factory=list)
    """Turn ids answered under this fence whose reply marks the worker still has to write."""
    in_flight: int = 0
    """Requests to the customer (Bot API) under way: a lease lost meanwhile lets them finish, because one
    already written may have been delivered, and only a finished one can be recorded (heartbeat)."""

    def take_deferred_replies(self) -> tuple[str, ...]:
        """The reply marks left to the worker, handed over once."""
        taken, self.deferred_replies = tuple(self.deferred_replies), []
        return taken

    def remaining(self) -> float:
        return self.valid_until - self.margin - time.monotonic()

    def ensure_valid(self) -> None:
        """Raise LeaseLostError if the lease may have expired."""
        if self.remaining() <= 0:
            raise LeaseLostError(f"lease {self.token} may have expired; nothing is sent")


def token_of(fence: Fence | None) -> str:
    """The token scripts check ('' = unfenced, single-process mode)."""
    return fence.token if fence is not None else ""


CURRENT_FENCE: ContextVar[Fence | None] = ContextVar("current_fence", default=None)
"""The fence of the chat whose work runs in this context (set by the queue worker for each item; the
tasks a handler starts inherit it). The Bot API session checks it once a request has its connection,
right before the request is written (bot/telegram/session.py)."""
