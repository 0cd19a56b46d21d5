"""The feedback buttons: Yes / No (the first press counts; a second does nothing new) and "Talk to a
person" after a No (the /operator flow, when handoff is on)."""

from __future__ import annotations

import contextlib
import logging

from aiogram import Bot, Router
from aiogram.exceptions import TelegramBadRequest
from aiogram.types import CallbackQuery, Update

from bot.settings import BotSettings
from bot.telegram.desk import HandoffDesk
from bot.telegram.feedback import CALLBACK_PREFIX, Press, parse_press, person_button
from bot.telegram.texts import Texts
from services.core.fence import Fence
from services.ports.queue import item_id_of

log = logging.getLogger(__name__)


async def on_press(
    callback: CallbackQuery,
    bot: Bot,
    desk: HandoffDesk,
    settings: BotSettings,
    event_update: Update,
    fence: Fence | None = None,
) -> None:
    press, message, feedback = parse_press(callback.data), callback.message, desk.feedback
    if press is None or message is None or feedback is None or message.chat.type != "private":
        await _answer(callback)
        return
    chat_id = message.chat.id
    say = Texts.for_user(callback.from_user, settings)
    item_id = item_id_of(event_update.update_id)
    if press.choice == "person":
        await _answer(callback)
        if desk.enabled and await desk.open_record(chat_id) is None:
            reason = desk.ops("op_reason_feedback")
            await desk.start(bot, chat_id, user=callback.from_user, reason=reason, trigger="feedback", say=say,
                             item_id=item_id, fence=fence, private=True)  # fmt: skip
        return
    rated = await feedback.rate(chat_id, press, item_id)
    if rated == "none":  # pressed before (or the conversation is gone): nothing new
        await _answer(callback)
        return
    await _answer(callback, say("feedback_noted"))
    with contextlib.suppress(TelegramBadRequest):  # the buttons go (best effort: "message is not modified")
        await bot.edit_message_reply_markup(chat_id=chat_id, message_id=message.message_id, reply_markup=None)
    await _reply(bot, chat_id, press, say, desk.enabled, fence)


async def _reply(bot: Bot, chat_id: int, press: Press, say: Texts, handoff: bool, fence: Fence | None) -> None:
    if fence is not None:
        fence.ensure_valid()
    if press.choice == "yes":
        await bot.send_message(chat_id, say("feedback_thanks"))
    elif handoff:
        await bot.send_message(
            chat_id, say("feedback_sorry_person"), reply_markup=person_button(say, press.conversation)
        )
    else:
        await bot.send_message(chat_id, say("feedback_sorry"))


async def _answer(callback: CallbackQuery, text: str | None = None) -> None:
    """The press acknowledged (best effort: Telegram refuses an answer to an old press)."""
    try:
        await callback.answer(text)
    except TelegramBadRequest as exc:
        log.info("callback %s not answered: %s", callback.id, exc.message)


async def is_feedback(callback: CallbackQuery) -> bool:
    """A feedback button (a coroutine: aiogram runs magic filters in a worker thread)."""
    return (callback.data or "").startswith(CALLBACK_PREFIX)


def make_router() -> Router:
    router = Router(name="feedback")
    router.callback_query.register(on_press, is_feedback)
    return router
