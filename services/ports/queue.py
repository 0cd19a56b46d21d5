"""The work queue contract: a durable per-chat queue any worker serves (one chat at a time, in
order), its items, claims and steps, and the polling lease (who calls getUpdates)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

DEAD_LETTERED, TOLD, FINISHED = 1, 2, 3
"""How far giving up an item got: kept for an operator; its customer told it could not be answered; and,
with handoff on, the operators' ticket made (so a redelivery repeats none of it and misses none)."""


@dataclass(frozen=True, slots=True)
class QueueItem:
    """One queued item at the head of a chat's inbox, with its delivery history."""

    id: str
    payload: str
    enqueued_ms: int
    member: bytes
    """The inbox entry exactly as stored (what ``next`` acknowledges)."""
    order: int = 0
    started: int = 1
    """Attempts started on this item, this one included."""
    transient_failures: int = 0
    failures: int = 0
    """Earlier attempts that failed for a reason that will not pass by itself."""
    failing_for: float = 0.0
    """Seconds since its first transient failure (0: none)."""
    model_requests: int = 0
    """Model requests earlier attempts made and failed (capped per question)."""
    retry_in: float = 0.0
    """Seconds until it may be tried again (the provider's Retry-After or the backoff; 0: now)."""
    given_up: int = 0
    """How far giving it up got: 0 not given up, then DEAD_LETTERED, TOLD, FINISHED."""

    @property
    def vanished_attempts(self) -> int:
        """Earlier attempts that left no outcome: the worker died, or lost the chat's lease mid-item."""
        return self.started - 1 - self.transient_failures - self.failures


@dataclass(slots=True)
class Claim:
    """A chat this worker holds (or is about to take) the lease of."""

    chat_id: int
    token: str
    watchdog: int
    others_due: bool = True
    """Whether another chat was due when this one was claimed; if not, the worker waits for a wake-up
    instead of claiming again (one round trip less per update when the worker keeps up)."""


@dataclass(frozen=True, slots=True)
class Taken:
    """What ``enqueue_and_take`` did: whether the item was new and, when the caller now holds the
    chat's lease, the claim and its first step (the inbox head)."""

    new: bool
    claim: Claim | None = None
    step: Step | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """What ``next`` found: an item to process, the chat released (inbox empty), or the lease gone."""

    kind: Literal["item", "released", "lost", "busy"]
    item: QueueItem | None = None


class WorkQueue(Protocol):
    """A durable per-chat work queue: any worker serves any chat, one chat at a time, in order.
    Errors of the backend surface as StoreUnavailableError (transient)."""

    lease_ms: int

    async def enqueue(self, chat_id: int, item_id: str, payload: str, *, order: int) -> bool:
        """Store an item once (False: already taken in) and make its chat due."""
        ...

    async def enqueue_and_take(self, chat_id: int, item_id: str, payload: str, *, order: int, token: str) -> Taken:
        """Store an item once and, when nobody holds its chat, take the chat's lease for the caller, who
        then serves it (its claim and first step in ``Taken``); otherwise make the chat due."""
        ...

    async def claim(self, token: str) -> Claim | None:
        """The first due chat, its lease not yet taken (``next(acquire=True)`` takes it)."""
        ...

    async def next(
        self, claim: Claim, *, done: QueueItem | None = None, acquire: bool = False, replied: Sequence[str] = ()
    ) -> Step:
        """Acknowledge ``done``, then the inbox head, or the chat released when the inbox is empty.
        ``replied``: turn ids whose replies went out, marked in the same step (``Fence.deferred_replies``)."""
        ...

    async def note(
        self,
        claim: Claim,
        item: QueueItem,
        outcome: Literal["transient", "failed", "set_aside"],
        *,
        replied: Sequence[str] = (),
        model_requests: int = 0,
        retry_in: float = 0.0,
    ) -> None:
        """Record how an attempt on ``item`` ended (counted towards giving up on it), the model requests
        it made, the wait before the next attempt, and mark ``replied``."""
        ...

    async def given_up(self, claim: Claim, item: QueueItem, stage: int) -> None:
        """Record how far giving ``item`` up got (DEAD_LETTERED, TOLD, FINISHED; never lowered)."""
        ...

    async def defer(self, claim: Claim, seconds: float) -> None:
        """Give the chat up, due again in ``seconds``."""
        ...

    async def wait_for_work(self, seconds: float) -> None: ...

    async def renew(self, claim: Claim) -> bool:
        """Extend the chat's lease; False once it is lost."""
        ...

    async def hand_back(self, claim: Claim) -> None:
        """Give the chat up (due again at once for any worker)."""
        ...

    async def stats(self) -> tuple[int, float]:
        """Chats due now, and the age in seconds of the oldest due one."""
        ...


class PollingLease(Protocol):
    """Who polls getUpdates (one worker at a time) and the offset only the leader may move."""

    lease_ms: int

    async def lead(self) -> bool:
        """Take or renew the leadership; False while another worker holds it."""
        ...

    async def offset(self) -> int | None: ...

    async def set_offset(self, offset: int) -> bool:
        """Move the offset, only while still leading (False otherwise)."""
        ...

    async def resign(self) -> None: ...


def item_id_of(update_id: int) -> str:
    """The id of the item (and of the turn) a Telegram update becomes: the one spelling every step
    that names the update uses (queue, session turn ids, handoff relay marks, rate-limit keys)."""
    return f"u{update_id}"
