"""The session store contract: a chat's memory (summary, recent messages, a version fencing every
write) and what a commit or a turn-id lookup returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from services.core.fence import Fence
from services.core.records import Compaction, NewMessage, Session


@dataclass(frozen=True, slots=True)
class TurnStatus:
    """What is known of a turn id: committed (with its stored reply, if still verbatim) and replied."""

    committed: bool = False
    replied: bool = False
    reply: str | None = None


@dataclass(frozen=True, slots=True)
class CommitResult:
    version: int
    duplicate: bool = False
    """True when ``turn_id`` was already committed: nothing was written."""


class SessionStore(Protocol):
    """Per-chat memory: running summary + verbatim recent messages + a version used as a write fence.

    Every write is atomic and fenced by ``expected_version``: if the session changed since it was
    loaded, the write raises ConcurrentUpdateError and changes nothing. The version only grows (``reset``
    and ``forget`` move it on too), so a turn loaded before them can never be committed after them.

    Writes made on behalf of a queue worker carry its ``fence``; a store shared by several processes
    refuses them with LeaseLostError once the worker no longer holds the chat's lease. ``load`` raises
    CorruptSessionError for a session it cannot decode (``quarantine`` moves it aside).
    """

    async def load(self, chat_id: int) -> Session:
        """The whole session in one round trip (an empty Session if the chat is new)."""
        ...

    async def commit_turn(
        self,
        chat_id: int,
        *,
        expected_version: int,
        messages: Sequence[NewMessage],
        compaction: Compaction | None = None,
        turn_id: str | None = None,
        fence: Fence | None = None,
    ) -> CommitResult:
        """Append ``messages`` (and apply ``compaction``) atomically. A ``turn_id`` that was already
        committed is recognised and nothing is written (``duplicate=True``)."""
        ...

    async def apply_compaction(
        self, chat_id: int, *, expected_version: int, compaction: Compaction, fence: Fence | None = None
    ) -> int:
        """Replace the summary and drop the folded oldest messages; returns the new version."""
        ...

    async def load_turn(self, chat_id: int, turn_id: str) -> tuple[TurnStatus, Session]:
        """``turn_status`` and ``load`` together, in one round trip (the start of every queued turn)."""
        ...

    async def turn_status(self, chat_id: int, turn_id: str) -> TurnStatus:
        """Whether a turn with this id was committed and its reply sent (recent ids only)."""
        ...

    async def mark_replied(self, chat_id: int, turn_id: str, *, fence: Fence | None = None) -> None:
        """Record that the reply of this turn reached the customer."""
        ...

    async def reset(self, chat_id: int, *, fence: Fence | None = None) -> None:
        """Delete summary and messages together (the chat starts over; the version keeps counting)."""
        ...

    async def forget(self, chat_id: int, *, fence: Fence | None = None) -> None:
        """Delete every record of the conversation; only the version counter stays."""
        ...

    async def quarantine(self, chat_id: int, *, reason: str, fence: Fence | None = None) -> None:
        """Move an unreadable session aside for an operator; the chat starts over at a higher version."""
        ...

    async def ping(self) -> None:
        """Raise StoreUnavailableError if the store cannot be reached."""
        ...

    async def close(self) -> None: ...


TURN_IDS_KEPT = 1000
"""How many recent turn ids a chat remembers for deduplication."""
