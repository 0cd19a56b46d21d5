"""Ending a handoff: closed by an operator, by ``/new``, by the reply timeout or because its topic is
gone (the transcript folded into the summary first where the conversation goes on), after ``/forget``,
and the notices of each ending sent once."""

from __future__ import annotations

import logging

from aiogram import Bot

from bot.metrics import HANDOFFS_CLOSED
from bot.serving.failures import is_transient
from bot.telegram.desk.base import DeskBase
from bot.telegram.texts import text
from services.core.fence import Fence
from services.core.handoff_records import EndedBy, Handoff

log = logging.getLogger(__name__)

_ENDINGS: dict[str, str] = {
    "operator": "op_closed",
    "new": "op_ended_new",
    "forget": "op_ended_forget",
    "timeout": "op_overdue_resumed",
    "lost": "op_closed",
}
"""How a handoff ended → the line its topic gets."""


def _ending_mark(record: Handoff) -> str:
    """The relay marks of a handoff's ending notices (one set per handoff, whichever update retries)."""
    return f"end:{record.opened_ms}"


class Ending(DeskBase):
    async def end_or_resume(self, bot: Bot, chat_id: int, *, by: EndedBy, item_id: str, fence: Fence | None) -> None:
        """End the chat's open handoff (``/new``), or send what the ending of its last one did not
        (a failed attempt); nothing if there is none. Expects the chat's lock held."""
        record = await self._get(chat_id)
        if record.open:
            await self.end(bot, chat_id, record, by=by, item_id=item_id, fence=fence)
        else:
            await self._resume_ending(bot, chat_id, record, fence)

    async def end(
        self, bot: Bot, chat_id: int, record: Handoff, *, by: EndedBy, item_id: str, fence: Fence | None
    ) -> None:
        """End an open handoff (not for /forget: see ``forgotten``). Closed by an operator, by the
        timeout or because the topic is gone, the transcript is folded into the conversation's summary
        first (the assistant goes on from it; a failed fold raises a transient error and nothing is
        closed); /new drops the conversation anyway. Then the customer and the topic are told, each
        once. Expects the chat's lock held."""
        assert self.group is not None and self.memory is not None
        if by in ("operator", "timeout", "lost"):
            full = await self.store.get(chat_id, transcript=True)
            await self.memory.fold_transcript(chat_id, full.transcript, fence=fence)
        if await self.store.end(chat_id, item_id=f"{by} {item_id}", fence=fence):
            HANDOFFS_CLOSED.labels(by).inc()
        if self.feedback is not None:  # asked after it, when a person or the timeout ended it
            await self.feedback.handoff_ended(chat_id, by)
        await self._ended(bot, chat_id, record, by=by, fence=fence)

    async def _resume_ending(self, bot: Bot, chat_id: int, record: Handoff, fence: Fence | None) -> bool:
        """Send what the ending of the chat's closed handoff did not (its update failed after the
        close: redelivered in queued mode, sent again by a person in-process, or the deadline's next
        round); False if it was all sent."""
        by = record.closed_by.split(" ", 1)[0]
        if record.state != "closed" or by not in _ENDINGS:
            return False
        if await self.store.relay_state(chat_id, f"{_ending_mark(record)}:done") == "done":
            return False
        if self.feedback is not None:  # (its first attempt may have failed before recording it)
            await self.feedback.handoff_ended(chat_id, by)
        await self._ended(bot, chat_id, record, by=by, fence=fence)  # type: ignore[arg-type]
        return True

    async def _ended(self, bot: Bot, chat_id: int, record: Handoff, *, by: EndedBy, fence: Fence | None) -> None:
        """The notices of an ended handoff, each once (marked per handoff: a retry sends only what is
        not marked), then the chat leaves the open set and its deadline goes (only now: the deadline
        watcher redoes a timeout whose notices failed)."""
        assert self.group is not None
        mark = _ending_mark(record)
        minutes = round(self.settings.handoff_reply_timeout_seconds / 60)
        if record.topic_id is not None and by != "lost":
            body = self._ops(_ENDINGS[by], minutes=minutes)
            await self._notify(bot, chat_id, f"{mark}:topic", self.group, body, fence, thread=record.topic_id)
            await self._close_topic(bot, record.topic_id)
        customer = {"operator": "handoff_closed", "timeout": "handoff_slow_resumed", "lost": "handoff_lost"}
        if by in customer:
            body = text(record.language or self._ops.language, customer[by])
            await self._notify(bot, chat_id, f"{mark}:customer", chat_id, body, fence)
        await self.store.record(chat_id, f"{mark}:done", None, fence=fence)
        await self.store.track(chat_id, open=False)
        await self._gauge()

    async def forgotten(self, bot: Bot, chat_id: int, record: Handoff, fence: Fence | None) -> None:
        """After /forget deleted an open handoff (``record``, read before): counted, and the topic told
        and closed, best effort (the data is gone already; a failure here is only logged)."""
        assert self.group is not None
        HANDOFFS_CLOSED.labels("forget").inc()
        await self._gauge()
        if record.topic_id is None:
            return
        minutes = round(self.settings.handoff_reply_timeout_seconds / 60)
        try:
            await self._send_topic(bot, self._ops("op_ended_forget", minutes=minutes), record.topic_id, fence)
            await self._close_topic(bot, record.topic_id)
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("chat %s: the topic %s was not told about /forget: %s", chat_id, record.topic_id, exc)

    async def overdue(self, bot: Bot, chat_id: int, fence: Fence | None) -> None:
        """No operator answered in time: the customer is told, the topic flagged; with
        ``HANDOFF_RESUME_ON_TIMEOUT`` the assistant takes the chat back. Safe to redo: the notices are
        marked once sent, the flag is set after them. The reply deadline is removed here (the open
        set is not touched: ``start`` and ``end`` own it)."""
        assert self.group is not None
        async with self.lock(chat_id):
            record = await self._get(chat_id)
            step = f"timeout:{record.opened_ms}"
            if await self._resume_ending(bot, chat_id, record, fence):  # redone after a failed notice
                return
            if record.open and not record.first_reply_ms and not record.flagged:
                if self.settings.handoff_resume_on_timeout:
                    await self.end(bot, chat_id, record, by="timeout", item_id=step, fence=fence)
                    return
                minutes = round(self.settings.handoff_reply_timeout_seconds / 60)
                if record.topic_id is not None:
                    body = self._ops("op_overdue", minutes=minutes)
                    await self._notify(bot, chat_id, f"{step}:overdue-topic", self.group, body, fence,
                                       thread=record.topic_id)  # fmt: skip
                body = text(record.language or self._ops.language, "handoff_slow")
                await self._notify(bot, chat_id, f"{step}:overdue-customer", chat_id, body, fence)
                await self.store.flag(chat_id, fence=fence)
            await self.store.track(chat_id, open=None, reply_within=None)
