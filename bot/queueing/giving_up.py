"""Promises kept when an update is given up: its customer, who may have been told "saved, I will
answer", gets a final message saying it could not be answered; with handoff on, a person takes it over
(a ticket with the question, or a note in the open handoff). The worker calls this once the update is
a dead letter, marks the message sent, and retries it when Telegram cannot take it now."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramForbiddenError
from aiogram.types import Message, Update

from bot.metrics import GIVEN_UP_TOLD
from bot.queueing.worker import GiveUp
from bot.settings import BotSettings
from bot.telegram.desk import HandoffDesk
from bot.telegram.texts import Texts, pick_language, text
from services.core.fence import Fence
from services.ports.queue import FINISHED, TOLD, QueueItem

log = logging.getLogger(__name__)

QUESTION_IN_TICKET = 500
"""Characters of the unanswered message quoted to the operators."""


def customer_message(item: QueueItem, bot: Bot, chat_id: int) -> Message | None:
    """The customer's message the item carries, or None (not a message, or unreadable)."""
    try:
        update = Update.model_validate(json.loads(item.payload), context={"bot": bot})
    except ValueError:
        return None
    message = update.message
    return message if message is not None and message.chat.id == chat_id else None


def tell_given_up(bot: Bot, desk: HandoffDesk, settings: BotSettings) -> GiveUp:
    """The worker's ``giving_up`` hook."""

    async def tell(
        chat_id: int, item: QueueItem, fence: Fence, told: bool, mark: Callable[[int], Coroutine[Any, Any, None]]
    ) -> None:
        message = customer_message(item, bot, chat_id)
        if message is None or desk.is_operator_group(chat_id):
            return
        say = Texts.for_user(message.from_user, settings)
        if not told:
            fence.ensure_valid()
            try:
                await bot.send_message(chat_id, say("given_up_handoff" if desk.enabled else "given_up"))
            except (TelegramForbiddenError, TelegramBadRequest) as exc:  # blocked, chat gone: nobody to tell
                log.warning("chat %s: cannot tell the customer %s was given up: %s", chat_id, item.id, exc)
                return
            GIVEN_UP_TOLD.inc()
            await mark(TOLD)
        if desk.enabled:  # "a person will look at it": retried like the message until the ticket is made
            await _to_operators(bot, desk, settings, message, item, say, fence)
        await mark(FINISHED)

    return tell


async def _to_operators(
    bot: Bot, desk: HandoffDesk, settings: BotSettings, message: Message, item: QueueItem, say: Texts, fence: Fence
) -> None:
    """A ticket for the operators (each step of ``desk.start`` is safe to redo), or a note in the
    chat's open handoff."""
    assert desk.group is not None
    chat_id = message.chat.id
    question = (message.text or message.caption or "")[:QUESTION_IN_TICKET]
    reason = text(pick_language(settings.default_language, "en"), "op_reason_given_up", question=question)
    record = await desk.open_record(chat_id)
    if record is not None and record.topic_id is not None:
        fence.ensure_valid()
        await bot.send_message(desk.group, reason, message_thread_id=record.topic_id)
        return
    await desk.start(
        bot, chat_id, user=message.from_user, reason=reason, trigger="given_up", say=say,
        item_id=f"{item.id}:given-up", fence=fence, private=message.chat.type == "private",
    )  # fmt: skip
