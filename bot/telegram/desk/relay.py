"""Relaying during a handoff, both directions, each message exactly once: the customer's into their
topic, an operator's from the topic to the customer; and the operators' commands in a topic
(``/close``, ``/note``: matched by the router's Command filters, not parsed here)."""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.types import Message

from bot.metrics import HANDOFF_FIRST_REPLY
from bot.telegram.desk.base import REFUSED, RELAYED_CONTENT, content_kind, describe, topic_gone
from bot.telegram.desk.ending import Ending
from services.core.fence import Fence
from services.core.handoff_records import Handoff, TranscriptEntry

log = logging.getLogger(__name__)


class Relaying(Ending):
    async def from_customer(self, bot: Bot, message: Message, item_id: str, fence: Fence | None) -> None:
        """Copy the customer's message into the topic (exactly once). If the topic is gone (deleted
        by the operators), the handoff ends and the customer is told the assistant is back."""
        assert self.group is not None
        chat_id = message.chat.id
        async with self.lock(chat_id):
            record = await self._get(chat_id)
            if not record.open:
                log.info("chat %s: the handoff ended meanwhile; %s not relayed", chat_id, item_id)
                return
            if record.topic_id is None:  # its topic is in another group (OPERATOR_CHAT_ID changed)
                log.warning("chat %s: the open handoff has no topic in the operator group; it ends", chat_id)
                await self.end(bot, chat_id, record, by="lost", item_id=item_id, fence=fence)
                return
            if content_kind(message) not in RELAYED_CONTENT or not await self._begin(chat_id, item_id, fence):
                return
            try:
                await bot.copy_message(self.group, chat_id, message.message_id, message_thread_id=record.topic_id)
            except REFUSED as exc:
                if not topic_gone(exc):
                    raise
                log.warning("chat %s: topic %s is gone (%s); the handoff ends", chat_id, record.topic_id, exc)
                await self.end(bot, chat_id, record, by="lost", item_id=item_id, fence=fence)
                return
            await self.store.record(chat_id, item_id, TranscriptEntry("customer", describe(message)), fence=fence)
            if self.feedback is not None:  # the conversation goes on (its quiet gap starts again)
                await self.feedback.relayed(chat_id, item_id)

    async def _customer_of(self, bot: Bot, message: Message) -> tuple[int, int] | None:
        """(customer chat, topic) of a message in the operator group, if it is in a topic the bot opened
        for a handoff. Operators posting as the group (anonymous admins) count; the bot's own messages
        and other chats posting in do not."""
        thread = message.message_thread_id if message.is_topic_message else None
        if thread is None or (message.from_user is not None and message.from_user.id == bot.id):
            return None
        if message.sender_chat is not None and message.sender_chat.id != message.chat.id:
            return None
        chat_id = await self.store.chat_of_topic(message.chat.id, thread)
        if chat_id is None:
            log.info("operator group: message in topic %s, which no handoff opened; ignored", thread)
            return None
        return chat_id, thread

    async def customer_of(self, bot: Bot, message: Message) -> tuple[int, int] | None:
        """(customer chat, topic) of an operator's message in a handoff topic (``/faq`` there)."""
        return await self._customer_of(bot, message)

    async def _open_in(self, bot: Bot, record: Handoff, thread: int, fence: Fence | None) -> bool:
        """Whether the handoff ``record`` is open in topic ``thread``; if not, the topic is told."""
        if record.open and record.topic_id == thread:
            return True
        await self._send_topic(bot, self._ops("op_not_open"), thread, fence)
        return False

    async def from_operator(self, bot: Bot, message: Message, item_id: str, fence: Fence | None) -> None:
        """A message in the operator group: copied to the customer if it is in the topic of a chat whose
        handoff is open (once, in the transcript; the first one stops the reply deadline)."""
        found = await self._customer_of(bot, message)
        if found is None:
            return
        chat_id, thread = found
        async with self.lock(chat_id):
            relayed = content_kind(message) in RELAYED_CONTENT
            record = await self._get(chat_id)
            if not record.open or record.topic_id != thread:
                if relayed:
                    await self._send_topic(bot, self._ops("op_not_open"), thread, fence)
                return
            if not relayed or not await self._begin(chat_id, item_id, fence):
                return
            await bot.copy_message(chat_id, message.chat.id, message.message_id)
            recorded = await self.store.record(
                chat_id, item_id, TranscriptEntry("operator", describe(message)), fence=fence
            )
            if recorded.first_reply_seconds is not None:
                HANDOFF_FIRST_REPLY.observe(recorded.first_reply_seconds)
                await self.store.track(chat_id, open=None, reply_within=None)

    async def close_from_operator(self, bot: Bot, message: Message, item_id: str, fence: Fence | None) -> None:
        """``/close`` in a topic: the handoff ends (or the notices of its last ending that were not
        sent go out now)."""
        found = await self._customer_of(bot, message)
        if found is None:
            return
        chat_id, thread = found
        async with self.lock(chat_id):
            record = await self._get(chat_id)
            if await self._resume_ending(bot, chat_id, record, fence):
                return  # the last ending's notices were not all sent: now they are
            if await self._open_in(bot, record, thread, fence):
                await self.end(bot, chat_id, record, by="operator", item_id=item_id, fence=fence)

    async def note_from_operator(
        self, bot: Bot, message: Message, note: str, item_id: str, fence: Fence | None
    ) -> None:
        """``/note text`` in a topic: kept in the transcript (folded into the summary at the end),
        never sent to the customer."""
        found = await self._customer_of(bot, message)
        if found is None:
            return
        chat_id, thread = found
        async with self.lock(chat_id):
            if await self._open_in(bot, await self._get(chat_id), thread, fence) and note:
                await self.store.record(chat_id, item_id, TranscriptEntry("note", note), fence=fence)
