"""The engine's part of a handoff: a fresh summary for the ticket, and the handoff transcript folded
into the conversation summary when it ends (beside the compactor, which folds turns the same way)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from services.engine.handoff_records import TranscriptEntry
from services.engine.models import Compaction, StoredMessage
from services.engine.summarizer import Summarizer
from services.engine.summary_state import SummaryState
from services.errors import ConcurrentUpdateError, SummaryError, SummaryUnavailableError
from services.fence import Fence
from services.ports.sessions import SessionStore

log = logging.getLogger(__name__)

RECENT_TURNS_IN_TICKET = 6
"""Messages of the verbatim history the ticket repeats word for word."""


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
