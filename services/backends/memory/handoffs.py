"""InMemoryHandoffStore: handoff records, relayed ids, topic bindings and reply deadlines of one
process (``services.ports.handoffs``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from services.core.fence import Fence
from services.core.handoff_records import (
    NEEDS_OPEN,
    RELAYED_IDS_KEPT,
    TRANSCRIPT_KEPT,
    Handoff,
    Recorded,
    TranscriptEntry,
)
from services.ports.handoffs import RelayState


class InMemoryHandoffStore:
    """Same contract as the Redis handoff store, for one process (no leases: ``fence`` is not checked)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._records: dict[int, Handoff] = {}
        self._relayed: dict[int, dict[str, None]] = {}
        self._topics: dict[tuple[int, int], int] = {}
        self._deadlines: dict[int, float] = {}
        self._open: set[int] = set()
        self._now = clock

    def _ms(self) -> int:
        return int(self._now() * 1000)

    async def get(self, chat_id: int, *, transcript: bool = True) -> Handoff:
        record = self._records.get(chat_id, Handoff())
        return record if transcript else replace(record, transcript=())

    async def set_topic(self, chat_id: int, group_id: int, topic_id: int, *, fence: Fence | None = None) -> None:
        self._records[chat_id] = replace(await self.get(chat_id), topic_id=topic_id, topic_group=group_id)

    async def start(
        self, chat_id: int, *, reason: str, trigger: str, language: str, item_id: str = "", fence: Fence | None = None
    ) -> bool:
        record = await self.get(chat_id)
        if record.open:
            return False
        self._records[chat_id] = Handoff(
            state="open", topic_id=record.topic_id, topic_group=record.topic_group, reason=reason,
            trigger=trigger, language=language, opened_ms=self._ms(), opened_by=item_id,
        )  # fmt: skip
        return True

    async def record(
        self, chat_id: int, item_id: str, entry: TranscriptEntry | None, *, fence: Fence | None = None
    ) -> Recorded:
        record = self._records.get(chat_id)
        if record is None or (entry is not None and entry.who in NEEDS_OPEN and not record.open):
            return Recorded(new=False)
        relayed = self._relayed.setdefault(chat_id, {})
        if item_id in relayed:
            return Recorded(new=False)
        relayed.pop(f"~{item_id}", None)
        relayed[item_id] = None
        while len(relayed) > RELAYED_IDS_KEPT:
            relayed.pop(next(iter(relayed)))
        record = await self.get(chat_id)
        first: float | None = None
        if entry is None:
            return Recorded(new=True)
        changes: dict[str, object] = {"transcript": (*record.transcript, entry)[-TRANSCRIPT_KEPT:]}
        if entry.who == "operator" and not record.first_reply_ms:
            now = self._ms()
            changes["first_reply_ms"] = now
            first = max(0.0, (now - record.opened_ms) / 1000)
        self._records[chat_id] = replace(record, **changes)  # type: ignore[arg-type]
        return Recorded(new=True, first_reply_seconds=first)

    async def begin_relay(self, chat_id: int, item_id: str, *, fence: Fence | None = None) -> None:
        if chat_id not in self._records:
            return
        self._relayed.setdefault(chat_id, {})[f"~{item_id}"] = None

    async def relay_state(self, chat_id: int, item_id: str) -> RelayState:
        relayed = self._relayed.get(chat_id, {})
        return "done" if item_id in relayed else "started" if f"~{item_id}" in relayed else "new"

    async def flag(self, chat_id: int, *, fence: Fence | None = None) -> bool:
        record = await self.get(chat_id)
        if not record.open or record.flagged:
            return False
        self._records[chat_id] = replace(record, flagged=True)
        return True

    async def end(self, chat_id: int, *, item_id: str = "", fence: Fence | None = None) -> bool:
        record = await self.get(chat_id)
        if not record.open:
            return False
        self._records[chat_id] = replace(record, state="closed", closed_by=item_id, transcript=())
        return True

    async def bind_topic(self, group_id: int, topic_id: int, chat_id: int) -> None:
        self._topics[group_id, topic_id] = chat_id

    async def chat_of_topic(self, group_id: int, topic_id: int) -> int | None:
        return self._topics.get((group_id, topic_id))

    async def track(self, chat_id: int, *, open: bool | None, reply_within: float | None = None) -> None:
        if open is True:
            self._open.add(chat_id)
        elif open is False:
            self._open.discard(chat_id)
        if reply_within is None:
            self._deadlines.pop(chat_id, None)
        else:
            self._deadlines[chat_id] = self._now() + reply_within

    async def due(self, limit: int = 100) -> list[int]:
        now = self._now()
        return sorted((c for c, at in self._deadlines.items() if at <= now), key=self._deadlines.__getitem__)[:limit]

    async def open_count(self) -> int:
        return len(self._open)

    async def unbind(self, chat_id: int, group_id: int | None, topic_id: int | None) -> None:
        if group_id is not None and topic_id is not None and self._topics.get((group_id, topic_id)) == chat_id:
            del self._topics[group_id, topic_id]
        await self.track(chat_id, open=False)

    def _drop(self, chat_id: int) -> None:
        """Drop the chat's record, transcript and relayed ids (part of /forget)."""
        self._records.pop(chat_id, None)
        self._relayed.pop(chat_id, None)
