"""A handoff's records as data (no I/O): the chat's handoff record, its transcript entries, what a
relayed write did, and the bounds every backend keeps. A leaf module: the handoff contract
(``services.ports.handoffs``), the backends, the engine and the bot all build on it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

Who = Literal["customer", "operator", "note", "event"]
Trigger = Literal["command", "model"]
EndedBy = Literal["operator", "new", "forget", "timeout", "lost"]

RELAYED_IDS_KEPT = 1000
"""How many relayed message ids a chat remembers (exactly-once relaying)."""

TRANSCRIPT_KEPT = 500
"""How many transcript entries a handoff keeps (the newest; older ones are dropped and never reach the
summary): a handoff's transcript is bounded, and so is the one summarizer call that folds it."""

NEEDS_OPEN = frozenset({"customer", "operator", "note"})
"""Transcript entries written only while the handoff is open (the ticket and relay marks need only the
record to exist: nothing at all is written after /forget)."""


@dataclass(frozen=True, slots=True)
class TranscriptEntry:
    who: Who
    text: str

    def to_json(self) -> str:
        return json.dumps({"w": self.who, "t": self.text}, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> TranscriptEntry:
        data = json.loads(raw)
        who = data["w"]
        if who not in ("customer", "operator", "note", "event"):
            raise ValueError(f"bad transcript entry {who!r}")
        return cls(who, str(data["t"]))


@dataclass(frozen=True, slots=True)
class Handoff:
    """A chat's handoff record. ``topic_id`` (a forum topic of the group ``topic_group``: topic ids
    repeat between groups) stays after the handoff is closed (the next one reopens the same topic);
    ``first_reply_ms`` is the time of the first operator message (Redis clock);
    ``opened_by``/``closed_by`` are the updates that opened and closed it (a retried update finishes
    its own steps)."""

    state: Literal["open", "closed", "none"] = "none"
    topic_id: int | None = None
    topic_group: int | None = None
    reason: str = ""
    trigger: str = ""
    language: str = ""
    opened_ms: int = 0
    first_reply_ms: int = 0
    flagged: bool = False
    opened_by: str = ""
    closed_by: str = ""
    transcript: tuple[TranscriptEntry, ...] = field(default_factory=tuple)

    @property
    def open(self) -> bool:
        return self.state == "open"


@dataclass(frozen=True, slots=True)
class Recorded:
    """What ``HandoffStore.record`` did: ``new`` False if the item was already relayed (nothing
    written); ``first_reply_seconds`` set when this was the handoff's first operator message."""

    new: bool
    first_reply_seconds: float | None = None
