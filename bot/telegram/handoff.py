"""Handoff to a human operator, Telegram side: the operator group's forum topics, the ticket, and
relaying messages both ways exactly once.

One forum topic per customer chat in ``OPERATOR_CHAT_ID``. In queued mode an operator's message is
queued into its customer chat's inbox, so both directions are served in order, fenced by that chat's
lease; in-process mode runs every step under the chat's ``lock``. A message or notice goes out only if
not yet marked relayed, and the mark is written right after it (a crash in between sends it again,
counted in ``sb_handoff_possible_duplicates_total``). Telegram's permanent refusals are logged and do
not stop the step."""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import replace

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramForbiddenError
from aiogram.types import Message, User

from bot.runtime.failures import is_transient
from bot.settings import BotSettings
from bot.telegram.render import TELEGRAM_TEXT_LIMIT
from bot.telegram.texts import Texts, pick_language, text
from bot.telegram.ticket import ticket_text
from services.engine.handoff_memory import HandoffMemory
from services.engine.handoff_records import EndedBy, Handoff, TranscriptEntry
from services.errors import SupportBotError
from services.fence import Fence
from services.metrics import (
    HANDOFF_FIRST_REPLY,
    HANDOFF_POSSIBLE_DUPLICATES,
    HANDOFF_TICKETS,
    HANDOFFS_CLOSED,
    HANDOFFS_OPEN,
    HANDOFFS_OPENED,
)
from services.ports.handoffs import HandoffStore

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

REFUSED = (TelegramBadRequest, TelegramForbiddenError)
"""Telegram's permanent refusals: retrying the same call cannot help."""


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


def topic_gone(exc: TelegramBadRequest | TelegramForbiddenError) -> bool:
    """The operators deleted the topic, or the bot is no longer in the operator group."""
    if isinstance(exc, TelegramForbiddenError):
        return True
    message = exc.message.lower()
    return "thread not found" in message or "topic_deleted" in message or "topic_id_invalid" in message


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


def topic_name(user: User | None, chat_id: int, unknown: str = "customer") -> str:
    """``unknown``: the name of a customer without a user (the operators' text ``op_customer``)."""
    name = user.full_name if user is not None else unknown
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
        self._locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()

    @property
    def enabled(self) -> bool:
        return self.group is not None

    def ops(self, key: str) -> str:
        """An operators' text (in the operators' language)."""
        return self._ops(key)

    def is_operator_group(self, chat_id: int) -> bool:
        return self.group is not None and chat_id == self.group

    def lock(self, chat_id: int) -> asyncio.Lock:
        """The customer chat's handoff lock (in-process mode: the operator group's updates, the
        customer's and the deadline watcher otherwise run concurrently). Not re-entrant: the methods
        below that take it are not called with it held; ``end`` and ``forgotten`` expect it held."""
        lock = self._locks.get(chat_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[chat_id] = lock
        return lock

    async def open_record(self, chat_id: int) -> Handoff | None:
        """The chat's handoff if one is open (None when handoff is off); without its transcript."""
        if self.group is None:
            return None
        record = await self._get(chat_id)
        return record if record.open else None

    async def _get(self, chat_id: int) -> Handoff:
        """The record without its transcript; its topic only if it is in this bot's operator group
        (after ``OPERATOR_CHAT_ID`` changed, an old topic id may be another customer's topic there)."""
        record = await self.store.get(chat_id, transcript=False)
        if record.topic_id is not None and record.topic_group != self.group:
            return replace(record, topic_id=None, topic_group=None)
        return record

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
        it, keeps the ticket from being posted twice and is stored as the handoff's ``opened_by``: its
        redelivery finishes the steps after the opening; a topic created by an attempt that died before
        storing its id stays behind, empty)."""
        assert self.group is not None and self.memory is not None
        async with self.lock(chat_id):
            record = await self._get(chat_id)
            if record.open and record.opened_by != item_id:
                await self._send(bot, chat_id, say("handoff_already"), fence)
                return
            if not record.open:
                await self._open(bot, chat_id, record, user=user, reason=reason, trigger=trigger, say=say,
                                 item_id=item_id, fence=fence)  # fmt: skip
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
            await self.store.record(chat_id, ticket_id, TranscriptEntry("event", "ticket posted"), fence=fence)
            HANDOFF_TICKETS.inc()
        opened = await self.store.open(
            chat_id, reason=reason, trigger=trigger, language=say.language, item_id=item_id, fence=fence
        )
        if opened:
            HANDOFFS_OPENED.labels(trigger).inc()

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

    # --- relaying ----------------------------------------------------------------------------------
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

    async def _command(self, bot: Bot, message: Message) -> tuple[str | None, str, bool]:
        """(``/close``-like command or None, its argument, addressed to another bot) of a message's
        text or media caption."""
        words = (message.text or message.caption or "").split(maxsplit=1)
        if not words or not words[0].startswith("/"):
            return None, "", False
        name, _, addressee = words[0].partition("@")
        if addressee and addressee.lower() != ((await bot.me()).username or "").lower():
            return None, "", True
        return name.lower(), words[1] if len(words) > 1 else "", False

    async def from_operator(self, bot: Bot, message: Message, item_id: str, fence: Fence | None) -> None:
        """A message in the operator group: relayed to the customer if it is in a topic the bot opened
        for a chat whose handoff is open; ``/close`` and ``/note`` are the operators' commands (in a
        text or a media caption). Operators posting as the group (anonymous admins) count; the bot's
        own messages and other chats posting in do not."""
        thread = message.message_thread_id if message.is_topic_message else None
        if thread is None or (message.from_user is not None and message.from_user.id == bot.id):
            return
        if message.sender_chat is not None and message.sender_chat.id != message.chat.id:
            return
        chat_id = await self.store.chat_of_topic(message.chat.id, thread)
        if chat_id is None:
            log.info("operator group: message in topic %s, which no handoff opened; ignored", thread)
            return
        command, argument, foreign = await self._command(bot, message)
        if foreign:
            return
        async with self.lock(chat_id):
            record = await self._get(chat_id)
            if command == "/close" and await self._resume_ending(bot, chat_id, record, fence):
                return  # the last ending's notices were not all sent: now they are
            if not record.open or record.topic_id != thread:
                if command is not None or content_kind(message) in RELAYED_CONTENT:
                    await self._send_topic(bot, self._ops("op_not_open"), thread, fence)
                return
            if command == "/close":
                await self.end(bot, chat_id, record, by="operator", item_id=item_id, fence=fence)
                return
            if command == "/note":
                if argument:
                    await self.store.record(chat_id, item_id, TranscriptEntry("note", argument), fence=fence)
                return
            if content_kind(message) not in RELAYED_CONTENT or not await self._begin(chat_id, item_id, fence):
                return
            await bot.copy_message(chat_id, message.chat.id, message.message_id)
            recorded = await self.store.record(
                chat_id, item_id, TranscriptEntry("operator", describe(message)), fence=fence
            )
            if recorded.first_reply_seconds is not None:
                HANDOFF_FIRST_REPLY.observe(recorded.first_reply_seconds)
                await self.store.track(chat_id, open=None, reply_within=None)

    # --- ending --------------------------------------------------------------------------------------
    async def finish(self, bot: Bot, chat_id: int, *, by: EndedBy, item_id: str, fence: Fence | None) -> None:
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

    # --- sending -------------------------------------------------------------------------------------
    async def _notify(
        self, bot: Bot, chat_id: int, mark: str, to: int, body: str, fence: Fence | None, *, thread: int | None = None
    ) -> None:
        """Send ``body`` once for the step ``mark`` of chat ``chat_id``'s handoff (the mark is written
        after it went out, or after Telegram refused it for good: that is logged, not retried)."""
        if await self.store.relay_state(chat_id, mark) == "done":
            return
        try:
            await self._send(bot, to, body, fence, thread=thread)
        except REFUSED as exc:
            log.warning("chat %s: notice %s to %s (topic %s) refused: %s", chat_id, mark, to, thread, exc)
        await self.store.record(chat_id, mark, None, fence=fence)

    async def _send_topic(self, bot: Bot, body: str, thread: int, fence: Fence | None) -> None:
        """A line in a topic, best effort (a deleted topic is logged)."""
        assert self.group is not None
        try:
            await self._send(bot, self.group, body, fence, thread=thread)
        except REFUSED as exc:
            log.warning("operator group: topic %s refused a line: %s", thread, exc)

    async def _close_topic(self, bot: Bot, thread: int) -> None:
        assert self.group is not None
        try:
            await bot.close_forum_topic(self.group, thread)
        except REFUSED as exc:
            log.info("topic %s not closed: %s", thread, exc.message)

    async def _send(self, bot: Bot, chat_id: int, body: str, fence: Fence | None, *, thread: int | None = None) -> None:
        if fence is not None:
            fence.ensure_valid()
        await bot.send_message(chat_id, body, message_thread_id=thread, parse_mode=None)

    async def _gauge(self) -> None:
        try:
            HANDOFFS_OPEN.set(await self.store.open_count())
        except SupportBotError as exc:
            log.debug("open handoffs not counted: %s", exc)
