"""Starting a handoff: the customer's topic opened (or reopened), the ticket posted once, the
handoff opened, the customer told."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramBadRequest
from aiogram.types import User

from bot.metrics import HANDOFF_TICKETS, HANDOFFS_OPENED
from bot.telegram.desk.base import DeskBase, split_text, topic_name
from bot.telegram.texts import Texts
from bot.telegram.ticket import ticket_text
from services.core.fence import Fence
from services.core.handoff_records import Handoff, TranscriptEntry
from services.core.records import StoredMessage

log = logging.getLogger(__name__)


class Starting(DeskBase):
    async def start(
        self,
        bot: Bot,
        chat_id: int,
        *,
        user: User | None,
        reason: str,
        trigger: str,
        say: Texts,
        item_id: str,
        fence: Fence | None,
        private: bool,
    ) -> None:
        """Open (or reopen) the chat's topic, post the ticket, open the handoff, tell the customer.
        Each step is safe to redo if a worker dies in the middle (``item_id``, the update that started
        it, keeps the ticket from being posted twice and is stored as the handoff's ``opened_by``: its
        redelivery finishes the steps after the opening; a topic created by an attempt that died before
        storing its id stays behind, empty). ``private``: a private chat (a group is never asked for feedback)."""
        assert self.group is not None and self.memory is not None
        async with self.lock(chat_id):
            record = await self._get(chat_id)
            if record.open and record.opened_by != item_id:
                await self._send(bot, chat_id, say("handoff_already"), fence)
                return
            if not record.open:
                await self._open(bot, chat_id, record, user=user, reason=reason, trigger=trigger, say=say,
                                 item_id=item_id, fence=fence, private=private)  # fmt: skip
            await self.store.track(chat_id, open=True, reply_within=self.settings.handoff_reply_timeout_seconds)
            await self._gauge()
            await self._notify(bot, chat_id, f"{item_id}:started", chat_id, say("handoff_started"), fence)

    async def _open(
        self,
        bot: Bot,
        chat_id: int,
        record: Handoff,
        *,
        user: User | None,
        reason: str,
        trigger: str,
        say: Texts,
        item_id: str,
        fence: Fence | None,
        private: bool,
    ) -> None:
        assert self.group is not None and self.memory is not None
        summary, recent = await self.memory.ticket_parts(chat_id)
        topic = await self._topic(bot, chat_id, record, user, fence)
        await self.store.bind_topic(self.group, topic, chat_id)
        ops = self._ops
        ticket = ticket_text(
            title=ops("op_ticket", name=topic_name(user, chat_id, ops("op_customer"))),
            summary=summary,
            recent=recent,
            reason=reason,
            language=say.language,
            labels={
                key: ops(f"op_{key}")
                for key in ("reason", "language", "summary", "no_summary", "recent", "customer", "assistant")
            },
        )
        # the ticket once: a redelivered start does not post it again (unless the attempt before died
        # while posting it: then it is posted again and counted)
        ticket_id = f"{item_id}:ticket"
        if await self._begin(chat_id, ticket_id, fence):
            for chunk in split_text(f"{ticket}\n\n{ops('op_how')}"):
                await self._send(bot, self.group, chunk, fence, thread=topic)
            await self._show_media(bot, chat_id, recent, topic, fence)
            await self.store.record(chat_id, ticket_id, TranscriptEntry("event", "ticket posted"), fence=fence)
            HANDOFF_TICKETS.inc()
        opened = await self.store.start(
            chat_id, reason=reason, trigger=trigger, language=say.language, item_id=item_id, fence=fence
        )
        if opened:
            HANDOFFS_OPENED.labels(trigger).inc()
        if self.feedback is not None:
            await self.feedback.handoff_opened(chat_id, private=private)

    async def _show_media(
        self, bot: Bot, chat_id: int, recent: Sequence[StoredMessage], topic: int, fence: Fence | None
    ) -> None:
        """The photos, recordings and files of the ticket's messages, by their file ids (best effort:
        the ticket already says what each one showed or said)."""
        assert self.group is not None
        for ref in (ref for message in recent for ref in message.media):
            if fence is not None:
                fence.ensure_valid()
            try:
                await _send_file(bot, self.group, topic, ref.kind, ref.file_id)
            except TelegramAPIError as exc:
                log.warning("chat %s: its %s could not be shown to the operators: %s", chat_id, ref.kind, exc)

    async def _topic(self, bot: Bot, chat_id: int, record: Handoff, user: User | None, fence: Fence | None) -> int:
        assert self.group is not None
        if record.topic_id is not None:
            try:
                await bot.reopen_forum_topic(self.group, record.topic_id)
                return record.topic_id
            except TelegramBadRequest as exc:
                if "TOPIC_NOT_MODIFIED" in exc.message:  # it was open
                    return record.topic_id
                log.warning("chat %s: topic %s cannot be reopened (%s); a new one", chat_id, record.topic_id, exc)
        if fence is not None:
            fence.ensure_valid()
        created = await bot.create_forum_topic(self.group, topic_name(user, chat_id, self._ops("op_customer")))
        await self.store.set_topic(chat_id, self.group, created.message_thread_id, fence=fence)
        return created.message_thread_id


async def _send_file(bot: Bot, chat_id: int, topic: int, kind: str, file_id: str) -> None:
    if kind == "photo":
        await bot.send_photo(chat_id, file_id, message_thread_id=topic)
    elif kind == "voice":
        await bot.send_voice(chat_id, file_id, message_thread_id=topic)
    elif kind == "audio":
        await bot.send_audio(chat_id, file_id, message_thread_id=topic)
    elif kind == "video_note":
        await bot.send_video_note(chat_id, file_id, message_thread_id=topic)
    elif kind in ("document", "image_file"):
        await bot.send_document(chat_id, file_id, message_thread_id=topic)
