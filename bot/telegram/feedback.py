"""The feedback question and the conversation events, Telegram side (docs/quality.md): what the
handlers and the desk report (a customer message, the bot's answer sent, a handoff opened or ended,
/new), the question asked once per conversation with Yes / No buttons, and the presses. Recording is
best effort (a failure is logged, the customer is still answered), but for a handoff's end (raised: the
item is retried); asking runs under the chat's lease."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramForbiddenError
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

from bot.metrics import (
    CONVERSATIONS,
    CONVERSATIONS_HANDED_OFF,
    ERRORS,
    FEEDBACK_ANSWERS,
    FEEDBACK_ASKED,
    FEEDBACK_POSSIBLE_DUPLICATES,
    FIRST_ANSWER,
)
from bot.settings import BotSettings
from bot.telegram.texts import Texts
from services.core.errors import StoreError
from services.core.fence import Fence
from services.core.quality import RATINGS, Rating
from services.ports.quality import ConversationLog, Rated

log = logging.getLogger(__name__)

CALLBACK_PREFIX = "fb:"
"""``fb:<conversation id>:yes|no|person``: the buttons' data (under Telegram's 64 bytes)."""
ENDINGS_ASKED_AFTER = frozenset({"operator", "timeout", "lost"})
"""A handoff that ended this way makes the question due (not /new, not /forget)."""


@dataclass(frozen=True, slots=True)
class Press:
    conversation: int
    choice: str


def parse_press(data: str | None) -> Press | None:
    """A button's data, or None for anything else (hostile input included)."""
    if not data or not data.startswith(CALLBACK_PREFIX) or len(data) > 64:
        return None
    conversation, _, choice = data[len(CALLBACK_PREFIX) :].partition(":")
    if not conversation.isdigit() or not conversation.isascii() or choice not in (*RATINGS, "person"):
        return None
    return Press(int(conversation), choice)


def question_buttons(say: Texts, conversation: int) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(
        inline_keyboard=[
            [
                InlineKeyboardButton(text=say(f"feedback_{r}"), callback_data=f"{CALLBACK_PREFIX}{conversation}:{r}")
                for r in RATINGS
            ]
        ]
    )


def person_button(say: Texts, conversation: int) -> InlineKeyboardMarkup:
    data = f"{CALLBACK_PREFIX}{conversation}:person"
    return InlineKeyboardMarkup(
        inline_keyboard=[[InlineKeyboardButton(text=say("feedback_person"), callback_data=data)]]
    )


class Feedback:
    """The conversation log as the bot uses it; ``after``: FEEDBACK_AFTER_SECONDS (0: never asked)."""

    def __init__(self, conversations: ConversationLog, *, after: int, gap: int, default_language: str) -> None:
        self.conversations = conversations
        self.after = after
        self.gap = gap
        self._default_language = default_language

    @classmethod
    def from_settings(cls, conversations: ConversationLog, settings: BotSettings) -> Feedback:
        after, gap = settings.feedback_after_seconds, settings.conversation_gap_seconds
        return cls(conversations, after=after, gap=gap, default_language=settings.default_language)

    @property
    def enabled(self) -> bool:
        return self.after > 0

    async def customer_message(
        self, chat_id: int, *, private: bool, language: str, sent_ms: int = 0, item_id: str = ""
    ) -> None:
        """``sent_ms``: the message's own date (a new conversation starts then); ``item_id``: its update
        (a redelivery is not counted again)."""
        try:
            started = await self.conversations.customer_message(
                chat_id, private=private, language=language, gap_seconds=self.gap, sent_ms=sent_ms, item_id=item_id
            )
        except StoreError as exc:
            return _not_recorded("a customer message", chat_id, exc)
        if started.new:
            CONVERSATIONS.inc()

    async def relayed(self, chat_id: int, item_id: str) -> None:
        try:
            await self.conversations.relayed(chat_id, item_id=item_id)
        except StoreError as exc:
            _not_recorded("a relayed customer message", chat_id, exc)

    async def answered(self, chat_id: int) -> None:
        try:
            first = await self.conversations.answered(chat_id, ask_after_seconds=self.after)
        except StoreError as exc:
            return _not_recorded("an answer", chat_id, exc)
        if first is not None:
            FIRST_ANSWER.observe(first)

    async def handoff_opened(self, chat_id: int, *, private: bool) -> None:
        try:
            first, started = await self.conversations.handoff_opened(chat_id, private=private)
        except StoreError as exc:
            return _not_recorded("a handoff", chat_id, exc)
        if started:
            CONVERSATIONS.inc()
        if first:
            CONVERSATIONS_HANDED_OFF.inc()

    async def handoff_ended(self, chat_id: int, by: str) -> None:
        """Raises StoreError: the update is retried (a lost end would keep the question off)."""
        await self.conversations.handoff_ended(chat_id, ask=self.enabled and by in ENDINGS_ASKED_AFTER)

    async def ended(self, chat_id: int) -> None:
        try:
            await self.conversations.ended(chat_id)
        except StoreError as exc:
            _not_recorded("/new", chat_id, exc)

    async def ask(self, bot: Bot, chat_id: int, fence: Fence | None) -> None:
        """The question, if it is still due (checked and marked under the lease), then marked asked. A
        failure raises (the item is tried again; one that died after sending sends it again, counted)."""
        ask = await self.conversations.begin_ask(chat_id, fence=fence)
        if ask is None:
            return
        if ask.again:
            FEEDBACK_POSSIBLE_DUPLICATES.inc()
            log.warning("chat %s: a feedback question was being sent by an attempt that died; sending it", chat_id)
        say = Texts(ask.language or self._default_language)
        if fence is not None:
            fence.ensure_valid()
        sent = True
        try:
            buttons = question_buttons(say, ask.conversation)
            await bot.send_message(chat_id, say("feedback_question"), reply_markup=buttons)
        except (TelegramBadRequest, TelegramForbiddenError) as exc:  # blocked, chat gone: never tried again
            log.warning("chat %s: the feedback question was refused: %s", chat_id, exc)
            sent = False
        if await self.conversations.asked(chat_id, ask.conversation, fence=fence, sent=sent) and sent:
            FEEDBACK_ASKED.inc()
            log.info("chat %s: feedback asked (conversation %s)", chat_id, ask.conversation)

    async def rate(self, chat_id: int, press: Press, item_id: str) -> Rated:
        rating: Rating = "yes" if press.choice == "yes" else "no"
        rated = await self.conversations.rate(chat_id, press.conversation, rating, item_id=item_id)
        if rated == "new":
            FEEDBACK_ANSWERS.labels(rating).inc()
        return rated


def _not_recorded(what: str, chat_id: int, exc: StoreError) -> None:
    ERRORS.labels(type(exc).__name__).inc()
    log.warning("chat %s: %s not recorded for the quality figures: %s", chat_id, what, exc)
