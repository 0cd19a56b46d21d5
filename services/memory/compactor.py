"""Compaction as a component around the store: folds the oldest turns into the summary when the
policy says so, either before a reply (forced: the prompt cannot hold the history) or after it
(proactive: the stored history passed the policy's trigger). While summaries fail (the summarizer's
circuit breaker open) proactive compaction waits and forced compaction folds extractively."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from services.core.errors import ConcurrentUpdateError, MessageTooLongError, SummaryError
from services.core.fence import Fence
from services.core.records import Compaction, PromptPart, Session, StoredMessage
from services.core.turns import CompactionReport
from services.memory.policy import CompactionPolicy
from services.memory.summarizer import Summarizer
from services.memory.window import Window
from services.ports.sessions import SessionStore

log = logging.getLogger(__name__)

Rewindow = Callable[[PromptPart, tuple[StoredMessage, ...]], Window]
"""Builds the prompt window again with a new summary part and the history left after folding."""


class Compactor:
    """Proactive: nothing is written unless the summarizer produced a valid summary (a failure keeps
    everything stored). Forced: the turns leave the prompt either way, so without a summary their
    identifiers are folded into it (``Summarizer.extractive``) rather than lost."""

    def __init__(
        self, *, store: SessionStore, summarizer: Summarizer, policy: CompactionPolicy, history_room: int
    ) -> None:
        self._store = store
        self._summarizer = summarizer
        self._policy = policy
        self.history_room = history_room

    def due(self, history_tokens: int, stored_messages: int) -> bool:
        """The policy's trigger, for the figures a turn already has (no store round trip)."""
        return self._policy.should_compact(history_tokens, stored_messages, self.history_room)

    async def fold(
        self, session: Session, fold: int, *, forced: bool = False
    ) -> tuple[Compaction | None, CompactionReport]:
        """Summarize the ``fold`` oldest messages into a new summary (nothing is written here); with
        ``forced``, fold them extractively when no summary can be made."""
        started = time.perf_counter()
        leaving = session.messages[:fold]
        failed = False
        if not self._summarizer.breaker.allow():
            if not forced:
                return None, CompactionReport()
            outcome = self._summarizer.extractive(session.summary, leaving)
        else:
            try:
                outcome = await self._summarizer.fold(session.summary, leaving)
            except SummaryError as exc:
                if not forced:
                    log.warning("chat %s: compaction failed, kept everything stored: %s", session.chat_id, exc)
                    return None, CompactionReport(failed=True, seconds=time.perf_counter() - started)
                log.warning(
                    "chat %s: no summary (%s); folding %d message(s) by identifiers", session.chat_id, exc, fold
                )
                outcome, failed = self._summarizer.extractive(session.summary, leaving), True
        report = CompactionReport(
            failed=failed,
            extractive=outcome.calls == 0,
            folded_messages=fold,
            restored_identifiers=len(outcome.restored),
            summary_tokens=outcome.block_tokens,
            usage=outcome.usage,
            seconds=time.perf_counter() - started,
        )
        return Compaction(fold, outcome.summary, outcome.block_tokens), report

    async def before_reply(
        self, session: Session, new_part: PromptPart, window: Window, rewindow: Rewindow
    ) -> tuple[Compaction | None, Window, CompactionReport]:
        """The prompt cannot hold the whole history: fold before replying. The compaction is committed
        with the turn. On failure the reply uses the plain window and nothing is folded."""
        must_fit = max(self.history_room - new_part.tokens, 0)
        fold = self._policy.plan_fold(session.messages, room=self.history_room, must_fit=must_fit)
        if fold == 0:
            return None, window, CompactionReport()
        compaction, report = await self.fold(session, fold, forced=True)
        if compaction is None:
            return None, window, report
        summary = self._summarizer.block_part(compaction.summary, tokens=compaction.summary_tokens)
        try:
            compacted = rewindow(summary, session.messages[fold:])
        except MessageTooLongError:
            log.warning("chat %s: new summary leaves no room for the message; not applied", session.chat_id)
            return None, window, replace(report, folded_messages=0, failed=True, extractive=False)
        return compaction, compacted, report

    async def compact_if_needed(self, chat_id: int, *, fence: Fence | None = None) -> CompactionReport | None:
        """Proactive compaction: fold the oldest turns if the stored history passed the trigger."""
        session = await self._store.load(chat_id)
        if not self._policy.should_compact(session.history_tokens, len(session.messages), self.history_room):
            return None
        fold = self._policy.plan_fold(session.messages, room=self.history_room)
        if fold == 0:
            return None
        compaction, report = await self.fold(session, fold)
        if compaction is None:
            return report
        try:
            await self._store.apply_compaction(
                chat_id, expected_version=session.version, compaction=compaction, fence=fence
            )
        except ConcurrentUpdateError:
            log.info("chat %s changed during compaction; it will be redone on a later turn", chat_id)
            return replace(report, folded_messages=0, failed=True)
        return report
