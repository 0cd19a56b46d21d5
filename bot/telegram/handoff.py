"""Handoff to a human operator, Telegram side: the operator group's forum topics, the ticket, and
relaying messages both ways exactly once.

One forum topic per customer chat in ``OPERATOR_CHAT_ID`` (reopened by the chat's next handoff).
Every step that writes is fenced by the customer chat's lease in queued mode: the intake queues an
operator's message into the inbox of the customer chat its topic belongs to, so both directions of a
handoff are served one at a time, in order, by whichever worker holds that chat.

Exactly once: a message is copied only if its update id is not yet marked relayed, and the mark is
written (with the transcript entry, one fenced script) right after the copy. A worker killed between
the copy and the mark copies that one message again on redelivery (the same window as a reply sent
before ``mark_replied``; such copies are counted in ``sb_handoff_possible_duplicates_total``: a
"started" mark is written before each copy); a worker that lost the lease copies nothing more (the
fence is checked before every copy)."""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest
from aiogram.types import Message, User

from bot.settings import BotSettings
from bot.telegram.render import TELEGRAM_TEXT_LIMIT
from bot.telegram.texts import Texts, pick_language, text
from services.errors import SupportBotError
from services.fence import Fence
from services.handoff import EndedBy, Handoff, HandoffMemory, TranscriptEntry, ticket_text
from services.metrics import (
    HANDOFF_FIRST_REPLY,
    HANDOFF_POSSIBLE_DUPLICATES,
    HANDOFF_TICKETS,
    HANDOFFS_CLOSED,
    HANDOFFS_OPEN,
    HANDOFFS_OPENED,
)
from services.ports import HandoffStore

log = logging.getLogger(__name__)

RELAYED_CONTENT = frozenset(
    {
        "text",
        "photo",
        "document",
        "voice",
        "sticker",
        "video",
        "audio",
        "animation",
        "video_note",
        "location",
        "contact",
    }
)
"""Messages that are copied between the customer and the topic (service messages are not)."""

TOPIC_NAME_LIMIT = 128


def content_kind(message: Message) -> str:
    """``text``, ``photo``, ... (aiogram's ContentType is an Enum: its str() is not the value)."""
    kind = message.content_type
    return str(getattr(kind, "value", kind))


def describe(message: Message) -> str:
    """A message as one transcript line: its text, or its kind and caption."""
    if message.text:
        return message.text
    kind = content_kind(message)
    return f"[{kind}] {message.caption}" if message.caption else f"[{kind}]"


def topic_name(user: User | None, chat_id: int) -> str:
    name = user.full_name if user is not None else "customer"
    username = f" @{user.username}" if user is not None and user.username else ""
    return f"{name}{username} · {chat_id}"[:TOPIC_NAME_LIMIT]


def split_text(body: str, limit: int = TELEGRAM_TEXT_LIMIT) -> list[str]:
    """Plain text in chunks of at most ``limit`` characters, split on line boundaries where possible."""
    chunks: list[str] = []
    current = ""
    for line in body.split("\n"):
        while len(line) > limit:
            if current:
                chunks.append(current)
                current = ""
            chunks.append(line[:limit])
            line = line[limit:]
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) > limit:
            chunks.append(current)
            current = line
        else:
            current = candidate
    if current:
        chunks.append(current)
    return chunks


class HandoffDesk:
    """What the handlers call. ``enabled`` is False without ``OPERATOR_CHAT_ID``."""

    def __init__(self, *, store: HandoffStore, memory: HandoffMemory | None, settings: BotSettings) -> None:
        self.store = store
        self.memory = memory
        self.settings = settings
        self.group = settings.operator_chat_id
        self._ops = Texts(pick_language(settings.default_language, "en"))

    @property
    def enabled(self) -> bool:
        return self.group is not None

    def is_operator_group(self, chat_id: int) -> bool:
        return self.group is not None and chat_id == self.group

    async def open_record(self, chat_id: int) -> Handoff | None:
        """The chat's handoff if one is open (None when handoff is off)."""
        if self.group is None:
            return None
        record = await self.store.get(chat_id)
        return record if record.open else None

    # --- starting ----------------------------------------------------------------------------------
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
    ) -> None:
        """Open (or reopen) the chat's topic, post the ticket, open the handoff, tell the customer.
        Each step is safe to redo if a worker dies in the middle (``item_id``, the update that started
        it, keeps the ticket from being posted twice; a topic created by an attempt that died before
        storing its id stays behind, empty)."""
        assert self.group is not None and self.memory is not None
        record = await self.store.get(chat_id)
        if record.open:
            await self._send(bot, chat_id, say("handoff_already"), fence)
            return
        summary, recent = await self.memory.ticket_parts(chat_id)
        topic = await self._topic(bot, chat_id, record, user, fence)
        await self.store.bind_topic(topic, chat_id)
        ops = self._ops
        ticket = ticket_text(
            title=ops("op_ticket", name=topic_name(user, chat_id)),
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
            await self.store.record(chat_id, ticket_id, TranscriptEntry("event", "ticket posted"), fence=fence)
            HANDOFF_TICKETS.inc()
        if await self.store.open(chat_id, reason=reason, trigger=trigger, language=say.language, fence=fence):
            HANDOFFS_OPENED.labels(trigger).inc()
        await self.store.track(chat_id, open=True, reply_within=self.settings.handoff_reply_timeout_seconds)
        await self._gauge()
        await self._send(bot, chat_id, say("handoff_started"), fence)

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
        created = await bot.create_forum_topic(self.group, topic_name(user, chat_id))
        await self.store.set_topic(chat_id, created.message_thread_id, fence=fence)
        return created.message_thread_id

    # --- relaying ----------------------------------------------------------------------------------
    async def from_customer(
        self, bot: Bot, message: Message, record: Handoff, item_id: str, fence: Fence | None
    ) -> None:
        """Copy the customer's message into the topic (exactly once)."""
        assert self.group is not None and record.topic_id is not None
        chat_id = message.chat.id
        if content_kind(message) not in RELAYED_CONTENT or not await self._begin(chat_id, item_id, fence):
            return
        await bot.copy_message(self.group, chat_id, message.message_id, message_thread_id=record.topic_id)
        await self.store.record(chat_id, item_id, TranscriptEntry("customer", describe(message)), fence=fence)

    async def _begin(self, chat_id: int, item_id: str, fence: Fence | None) -> bool:
        """False if ``item_id`` was relayed already. A copy begun by an attempt that died before
        recording it may have reached Telegram: it is copied again (counted, like a reply resent)."""
        state = await self.store.relay_state(chat_id, item_id)
        if state == "done":
            return False
        if state == "started":
            HANDOFF_POSSIBLE_DUPLICATES.inc()
            log.warning("chat %s: %s was being relayed by an attempt that died; copying it again", chat_id, item_id)
        else:
            await self.store.begin_relay(chat_id, item_id, fence=fence)
        if fence is not None:
            fence.ensure_valid()
        return True

    async def from_operator(self, bot: Bot, message: Message, item_id: str, fence: Fence | None) -> None:
        """A message in the operator group: relayed to the customer if it is in a topic the bot opened
        for a chat whose handoff is open; ``/close`` and ``/note`` are the operators' commands."""
        thread = message.message_thread_id
        if thread is None or (message.from_user is not None and message.from_user.is_bot):
            return
        chat_id = await self.store.chat_of_topic(thread)
        if chat_id is None:
            log.info("operator group: message in topic %s, which no handoff opened; ignored", thread)
            return
        record = await self.store.get(chat_id)
        words = (message.text or "").split(maxsplit=1)
        command = words[0].split("@", 1)[0].lower() if words and words[0].startswith("/") else None
        if not record.open or record.topic_id != thread:
            if command is not None or content_kind(message) in RELAYED_CONTENT:
                await self._send(bot, message.chat.id, self._ops("op_not_open"), fence, thread=thread)
            return
        if command == "/close":
            await self.end(bot, chat_id, record, by="operator", fence=fence)
            return
        if command == "/note":
            note = words[1] if len(words) > 1 else ""
            if note:
                await self.store.record(chat_id, item_id, TranscriptEntry("note", note), fence=fence)
            return
        if content_kind(message) not in RELAYED_CONTENT or not await self._begin(chat_id, item_id, fence):
            return
        await bot.copy_message(chat_id, message.chat.id, message.message_id)
        recorded = await self.store.record(
            chat_id, item_id, TranscriptEntry("operator", describe(message)), fence=fence
        )
        if recorded.first_reply_seconds is not None:
            HANDOFF_FIRST_REPLY.observe(recorded.first_reply_seconds)
            await self.store.track(chat_id, open=True, reply_within=None)

    # --- ending --------------------------------------------------------------------------------------
    async def end(self, bot: Bot, chat_id: int, record: Handoff, *, by: EndedBy, fence: Fence | None) -> None:
        """End an open handoff. Closed by an operator or by the timeout, the transcript is folded into
        the conversation's summary first (the assistant goes on from it); /new and /forget drop the
        conversation anyway. The customer and the topic are told."""
        assert self.group is not None and self.memory is not None
        if by in ("operator", "timeout") and not await self.memory.fold_transcript(
            chat_id, record.transcript, fence=fence
        ):
            log.error("chat %s: handoff closed without its transcript in the bot's memory", chat_id)
        if by != "forget":  # /forget deletes the record itself (backend.forget_chat)
            await self.store.close(chat_id, fence=fence)
        await self.store.track(chat_id, open=False)
        HANDOFFS_CLOSED.labels(by).inc()
        await self._gauge()
        line = {
            "operator": "op_closed",
            "new": "op_ended_new",
            "forget": "op_ended_forget",
            "timeout": "op_overdue_resumed",
        }[by]
        minutes = round(self.settings.handoff_reply_timeout_seconds / 60)
        if record.topic_id is not None:
            await self._send(bot, self.group, self._ops(line, minutes=minutes), fence, thread=record.topic_id)
            try:
                await bot.close_forum_topic(self.group, record.topic_id)
            except TelegramBadRequest as exc:
                log.info("topic %s not closed: %s", record.topic_id, exc.message)
        if by in ("operator", "timeout"):
            key = "handoff_closed" if by == "operator" else "handoff_slow_resumed"
            await self._send(bot, chat_id, text(record.language or self._ops.language, key), fence)

    async def overdue(self, bot: Bot, chat_id: int, fence: Fence | None) -> None:
        """No operator answered in time: the customer is told, the topic flagged; with
        ``HANDOFF_RESUME_ON_TIMEOUT`` the assistant takes the chat back."""
        assert self.group is not None
        record = await self.store.get(chat_id)
        if not record.open or record.first_reply_ms:
            await self.store.track(chat_id, open=record.open, reply_within=None)
            return
        if self.settings.handoff_resume_on_timeout:
            await self.end(bot, chat_id, record, by="timeout", fence=fence)
            return
        if await self.store.flag(chat_id, fence=fence):
            minutes = round(self.settings.handoff_reply_timeout_seconds / 60)
            if record.topic_id is not None:
                await self._send(
                    bot, self.group, self._ops("op_overdue", minutes=minutes), fence, thread=record.topic_id
                )
            await self._send(bot, chat_id, text(record.language or self._ops.language, "handoff_slow"), fence)
        await self.store.track(chat_id, open=True, reply_within=None)

    async def _send(self, bot: Bot, chat_id: int, body: str, fence: Fence | None, *, thread: int | None = None) -> None:
        if fence is not None:
            fence.ensure_valid()
        await bot.send_message(chat_id, body, message_thread_id=thread, parse_mode=None)

    async def _gauge(self) -> None:
        try:
            HANDOFFS_OPEN.set(await self.store.open_count())
        except SupportBotError as exc:
            log.debug("open handoffs not counted: %s", exc)
