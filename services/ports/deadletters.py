"""The dead letters and quarantine contracts: updates given up on and sessions moved aside, both
kept for an operator (``python -m bot dead-letters`` / ``quarantine``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One update an operator has to look at."""

    id: str
    chat_id: int
    item_id: str
    order: int
    payload: str
    """The update as it was queued (JSON), replayable as is."""
    error: str
    attempts: int
    worker: str
    at: float

    @staticmethod
    def make_id(chat_id: int, item_id: str) -> str:
        return f"{chat_id}:{item_id}"


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A session moved aside: which chat, when (epoch seconds) and why."""

    chat_id: int
    at: float
    reason: str


class DeadLetters(Protocol):
    """Updates given up on, kept for an operator (``python -m bot dead-letters``)."""

    async def add(
        self, *, chat_id: int, item_id: str, order: int, payload: str, error: str, attempts: int, worker: str
    ) -> DeadLetter:
        """Record (or overwrite: the id is the chat and the item) one dead letter."""
        ...

    async def list(self, limit: int = 50) -> list[DeadLetter]:
        """The newest ``limit`` records, newest first."""
        ...

    async def get(self, letter_id: str) -> DeadLetter | None: ...

    async def count(self) -> int: ...

    async def drop(self, *letter_ids: str) -> int: ...

    async def drop_chat(self, chat_id: int) -> None:
        """Every dead letter of one chat (/forget)."""
        ...


class Quarantine(Protocol):
    """Sessions moved aside because they could not be read (``python -m bot quarantine``)."""

    async def list(self) -> list[Quarantined]: ...

    async def show(self, chat_id: int) -> dict[str, Any] | None:
        """The quarantined copy as stored, or None."""
        ...

    async def drop(self, chat_id: int) -> int:
        """Delete the quarantined copy; how many records went."""
        ...
