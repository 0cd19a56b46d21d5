"""What starting, relaying and ending a handoff share (the desk's state, the per-chat lock, sending
each notice once) and the helpers for topics and transcripts.

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

from bot.metrics import (
    HANDOFF_POSSIBLE_DUPLICATES,
    HANDOFFS_OPEN,
)
from bot.settings import BotSettings
from bot.telegram.feedback import Feedback
from bot.telegram.render import TELEGRAM_TEXT_LIMIT
from bot.telegram.texts import Texts, pick_language
from services.core.errors import SupportBotError
from services.core.fence import Fence
from services.core.handoff_records import Handoff
from services.memory.handoff_memory import HandoffMemory
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


class DeskBase:
    """The desk's state and the steps every part uses. ``enabled`` is False without ``OPERATOR_CHAT_ID``."""

    def __init__(
        self,
        *,
        store: HandoffStore,
        memory: HandoffMemory | None,
        settings: BotSettings,
        feedback: Feedback | None = None,
    ) -> None:
        self.store = store
        self.feedback = feedback
        """The conversation events and the feedback question (told when a handoff opens or ends)."""
        self.memory = memory
        self.settings = settings
        self.group = settings.operator_chat_id
        self._ops = Texts(pick_language(settings.default_language, "en"))
        self._locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()

    @property
    def enabled(self) -> bool:
        return self.group is not None

    def ops(self, key: str, **values: object) -> str:
        """An operators' text (in the operators' language)."""
        return self._ops(key, **values)

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
