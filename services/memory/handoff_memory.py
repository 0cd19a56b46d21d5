"""The engine's part of a handoff: a fresh summary for the ticket, and the handoff transcript folded
into the conversation summary when it ends (beside the compactor, which folds turns the same way).
While summaries fail or the summary breaker is open, both fold extractively (identifiers kept), so a
handoff can start and end without the summary model."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from services.core.errors import ConcurrentUpdateError, SummaryError
from services.core.fence import Fence
from services.core.handoff_records import TranscriptEntry
from services.core.records import Compaction, StoredMessage
from services.core.summary_state import SummaryState
from services.memory.summarizer import Summarizer, SummaryOutcome
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
            summary = (await self._fold(chat_id, "ticket", session.summary, session.messages)).summary
        return summary, list(session.messages[-RECENT_TURNS_IN_TICKET:])

    async def fold_transcript(self, chat_id: int, entries: Sequence[TranscriptEntry], *, fence: Fence | None) -> None:
        """Fold the handoff into the summary (fenced, version-checked, retried on a concurrent change);
        extractively if no summary can be made."""
        if not entries:
            return
        messages = transcript_messages(entries)
        for attempt in range(1, self._attempts + 1):
            session = await self._store.load(chat_id)
            outcome = await self._fold(chat_id, "transcript", session.summary, messages)
            compaction = Compaction(0, outcome.summary, outcome.block_tokens)
            try:
                await self._store.apply_compaction(
                    chat_id, expected_version=session.version, compaction=compaction, fence=fence
                )
                return
            except ConcurrentUpdateError:
                if attempt == self._attempts:
                    raise

    async def _fold(
        self, chat_id: int, what: str, previous: SummaryState | None, messages: Sequence[StoredMessage]
    ) -> SummaryOutcome:
        """A summary of ``messages`` over ``previous``: by the model if the breaker allows, else (or if
        it fails) extractively."""
        if self._summarizer.breaker.allow():
            try:
                return await self._summarizer.fold(previous, messages)
            except SummaryError as exc:
                log.warning("chat %s: %s summary failed (%s); folded by identifiers", chat_id, what, exc)
        else:
            log.info("chat %s: summary calls are paused; %s folded by identifiers", chat_id, what)
        return self._summarizer.extractive(previous, messages)
