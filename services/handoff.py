"""Handoff to a human operator, engine side (no Telegram here): the record of a handoff, the ticket's
summary, and folding the handoff transcript into the conversation summary when it ends.

A chat's handoff record lives beside its session (same hash slot in Redis, see
``services.backends.redis.handoffs``) and every write a queue worker makes to it is fenced by the
chat's lease. The bot side (``bot.telegram.handoff``) talks to Telegram and calls into this."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from services.engine.models import Compaction, StoredMessage
from services.engine.summarizer import Summarizer
from services.engine.summary_state import SummaryState, render_summary
from services.errors import ConcurrentUpdateError, SummaryError, SummaryUnavailableError
from services.fence import Fence

if TYPE_CHECKING:
    from services.ports.sessions import SessionStore

log = logging.getLogger(__name__)

Who = Literal["customer", "operator", "note", "event"]
Trigger = Literal["command", "model"]
EndedBy = Literal["operator", "new", "forget", "timeout", "lost"]

HANDOFF_TOOL = "handoff_to_operator"
"""The OpenAI tool the model may call (offered only when handoff is on)."""

HANDOFF_TOOL_SPEC: dict[str, object] = {
    "type": "function",
    "function": {
        "name": HANDOFF_TOOL,
        "description": (
            "Hand the conversation over to a human support operator. Use it when the customer asks "
            "for a person, or when the request needs a human decision you cannot make."
        ),
        "parameters": {
            "type": "object",
            "properties": {"reason": {"type": "string", "description": "why a human is needed, one sentence"}},
            "required": ["reason"],
            "additionalProperties": False,
        },
    },
}

HANDOFF_MARK = "[handed over to a human operator] "
"""Prefix of the assistant message stored for a turn the model answered with the handoff tool (a
redelivered turn is recognised by it)."""

RELAYED_IDS_KEPT = 1000
"""How many relayed message ids a chat remembers (exactly-once relaying)."""

TRANSCRIPT_KEPT = 500
"""How many transcript entries a handoff keeps (the newest; older ones are dropped and never reach the
summary): a handoff's transcript is bounded, and so is the one summarizer call that folds it."""

NEEDS_OPEN = frozenset({"customer", "operator", "note"})
"""Transcript entries written only while the handoff is open (the ticket and relay marks need only the
record to exist: nothing at all is written after /forget)."""

RECENT_TURNS_IN_TICKET = 6
"""Messages of the verbatim history the ticket repeats word for word."""


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


def transcript_messages(entries: Sequence[TranscriptEntry]) -> list[StoredMessage]:
    """The handoff as turns the summarizer folds: the customer's messages as the customer's, the
    operator's as support replies. Internal notes are left out: whatever reaches the model's memory
    can reach the customer."""
    messages: list[StoredMessage] = []
    for seq, entry in enumerate(entries):
        if entry.who == "customer":
            messages.append(StoredMessage(seq, "user", entry.text, 0))
        elif entry.who == "operator":
            messages.append(StoredMessage(seq, "assistant", f"Human operator: {entry.text}", 0))
        elif entry.who == "note":
            continue
        else:
            messages.append(StoredMessage(seq, "assistant", f"({entry.text})", 0))
    return messages


class HandoffMemory:
    """The engine's part of a handoff: a fresh summary for the ticket, and the transcript folded into
    the conversation's summary when the handoff ends."""

    def __init__(self, *, store: SessionStore, summarizer: Summarizer, commit_attempts: int = 3) -> None:
        self._store = store
        self._summarizer = summarizer
        self._attempts = commit_attempts

    async def ticket_parts(self, chat_id: int) -> tuple[SummaryState | None, list[StoredMessage]]:
        """The structured summary of the whole stored conversation (made fresh if verbatim messages
        are not in it yet; nothing is written) and the newest messages verbatim."""
        session = await self._store.load(chat_id)
        summary = session.summary
        if session.messages:
            try:
                summary = (await self._summarizer.fold(session.summary, session.messages)).summary
            except SummaryError as exc:
                log.warning("chat %s: ticket summary failed (%s); the stored one is used", chat_id, exc)
        return summary, list(session.messages[-RECENT_TURNS_IN_TICKET:])

    async def fold_transcript(self, chat_id: int, entries: Sequence[TranscriptEntry], *, fence: Fence | None) -> None:
        """Fold the handoff into the summary (fenced, version-checked, retried on a concurrent change).
        ``SummaryUnavailableError`` (transient: the ending is retried) if the summarizer failed."""
        if not entries:
            return
        messages = transcript_messages(entries)
        for attempt in range(1, self._attempts + 1):
            session = await self._store.load(chat_id)
            try:
                outcome = await self._summarizer.fold(session.summary, messages)
            except SummaryError as exc:
                raise SummaryUnavailableError(
                    f"chat {chat_id}: the handoff transcript could not be summarized: {exc}"
                ) from exc
            compaction = Compaction(0, outcome.summary, outcome.block_tokens)
            try:
                await self._store.apply_compaction(
                    chat_id, expected_version=session.version, compaction=compaction, fence=fence
                )
                return
            except ConcurrentUpdateError:
                if attempt == self._attempts:
                    raise


def ticket_text(
    *,
    title: str,
    summary: SummaryState | None,
    recent: Sequence[StoredMessage],
    reason: str,
    language: str,
    labels: dict[str, str],
) -> str:
    """The ticket posted as the topic's first message (plain text; ``labels`` are the operator texts)."""
    lines = [title, "", f"{labels['reason']}: {reason}", f"{labels['language']}: {language}", ""]
    lines.append(f"{labels['summary']}:")
    lines.append(render_summary(summary) if summary is not None else labels["no_summary"])
    if recent:
        lines += ["", f"{labels['recent']}:"]
        for message in recent:
            who = labels["customer"] if message.role == "user" else labels["assistant"]
            lines.append(f"{who}: {message.content}")
    return "\n".join(lines)
