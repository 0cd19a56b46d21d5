"""The handoff store contract: a chat's handoff record, its transcript, the relayed-message marks,
and the global topic bindings and reply deadlines."""

from __future__ import annotations

from typing import Literal, Protocol

from services.core.fence import Fence
from services.core.handoff_records import Handoff, Recorded, TranscriptEntry

RelayState = Literal["new", "started", "done"]


class HandoffStore(Protocol):
    """Handoffs to a human operator. Per chat (fenced by the chat's lease like every session write):
    the record, its transcript and the ids of the messages already relayed (exactly once). Global:
    which forum topic belongs to which chat, and the reply deadlines of open handoffs."""

    async def get(self, chat_id: int, *, transcript: bool = True) -> Handoff:
        """The chat's record (``state="none"`` if it never had a handoff); its transcript only with
        ``transcript`` (the hot path and /forget do without it)."""
        ...

    async def set_topic(self, chat_id: int, group_id: int, topic_id: int, *, fence: Fence | None = None) -> None:
        """Remember the chat's forum topic and its group (reused by its next handoff in that group)."""
        ...

    async def start(
        self, chat_id: int, *, reason: str, trigger: str, language: str, item_id: str = "", fence: Fence | None = None
    ) -> bool:
        """Start a handoff (a fresh transcript; ``item_id``, the update that opened it, is kept as
        ``opened_by``); False if one is already open (nothing written)."""
        ...

    async def record(
        self, chat_id: int, item_id: str, entry: TranscriptEntry | None, *, fence: Fence | None = None
    ) -> Recorded:
        """Append ``entry`` (None: only the mark) and mark ``item_id`` relayed, atomically; nothing if
        it was already, if the record is gone (/forget), or, for a customer's or operator's message or
        a note, if the handoff is not open. The transcript keeps its newest ``TRANSCRIPT_KEPT``
        entries."""
        ...

    async def begin_relay(self, chat_id: int, item_id: str, *, fence: Fence | None = None) -> None:
        """Note that ``item_id`` is about to be copied (``record`` completes it); nothing once the
        record is gone."""
        ...

    async def relay_state(self, chat_id: int, item_id: str) -> RelayState:
        """``done`` (recorded: never copy again), ``started`` (a copy began and was not recorded: it
        may have reached Telegram) or ``new``."""
        ...

    async def flag(self, chat_id: int, *, fence: Fence | None = None) -> bool:
        """Mark an open handoff overdue (no operator reply in time); False if it was not open or
        already flagged."""
        ...

    async def end(self, chat_id: int, *, item_id: str = "", fence: Fence | None = None) -> bool:
        """End the open handoff (the topic id stays; ``item_id`` is kept as ``closed_by``; the
        transcript is deleted: fold it first); False if none was open."""
        ...

    async def bind_topic(self, group_id: int, topic_id: int, chat_id: int) -> None:
        """Global: the group's topic belongs to this chat (idempotent)."""
        ...

    async def chat_of_topic(self, group_id: int, topic_id: int) -> int | None: ...

    async def track(self, chat_id: int, *, open: bool | None, reply_within: float | None = None) -> None:
        """Global: whether the chat has an open handoff (None: left as it is), and its reply deadline
        (``reply_within`` seconds from now; None removes it). Idempotent."""
        ...

    async def due(self, limit: int = 100) -> list[int]:
        """Chats whose reply deadline has passed."""
        ...

    async def open_count(self) -> int:
        """Open handoffs (the gauge)."""
        ...

    async def unbind(self, chat_id: int, group_id: int | None, topic_id: int | None) -> None:
        """Global: forget the chat's topic and deadline (/forget)."""
