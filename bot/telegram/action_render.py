"""What a turn's actions show in Telegram, after the model's reply: a write's code-rendered text
under Confirm / Cancel, an approval's "waiting for a person" and its card in the operators' group
(Approve / Reject), the share-contact keyboard. Also who the actions act for (``customer_of``:
taken from the update by code, in private chats only)."""

from __future__ import annotations

import logging
from typing import Any

from aiogram import Bot
from aiogram.types import Message, User

from bot.telegram.action_buttons import approval_keyboard, confirm_keyboard, contact_keyboard
from bot.telegram.desk import HandoffDesk
from bot.telegram.desk.base import REFUSED, topic_gone
from bot.telegram.texts import Texts
from services.core.actions import Customer, PendingAction
from services.core.fence import Fence
from services.core.turns import TurnResult
from services.ports.backend import Backend

log = logging.getLogger(__name__)

PROMPT_CHARS = 2000
"""A decision's text is cut to this many characters (2 000 characters are at most 4 000 UTF-16 units:
within a message, with the card's own lines)."""


async def customer_of(message: Message, backend: Backend) -> Customer | None:
    """The customer of a private chat's message (the sender, and the phone number they shared with
    the button); None in groups: nobody's orders are acted on there (no tools)."""
    user = message.from_user
    if message.chat.type != "private" or user is None:
        return None
    return Customer(telegram_id=user.id, phone=await backend.actions.phone(message.chat.id))


async def render_actions(
    bot: Bot, chat_id: int, user: User | None, result: TurnResult, *, say: Texts, desk: HandoffDesk, fence: Fence | None
) -> None:
    """After the reply: the decision the turn waits for, and the share-contact button if a tool asked."""
    pending = result.pending
    if pending is not None and pending.state == "pending":
        if pending.risk == "write":
            keyboard = confirm_keyboard(pending.action_id, say)
            await _send(bot, chat_id, pending.prompt[:PROMPT_CHARS], fence, reply_markup=keyboard)
        elif pending.risk == "approval":
            await _send(bot, chat_id, say("approval_waiting"), fence)
            await post_card(bot, desk, pending, user, fence)
    if result.ask_contact:
        await _send(bot, chat_id, say("contact_ask"), fence, reply_markup=contact_keyboard(say))


async def post_card(
    bot: Bot, desk: HandoffDesk, pending: PendingAction, user: User | None, fence: Fence | None
) -> None:
    """The approval card in the operators' group: in the chat's forum topic while a handoff is open,
    else in the group's general topic (a deleted topic: the general one)."""
    if desk.group is None:  # the catalog refuses approval tools without OPERATOR_CHAT_ID: not reached
        log.error("chat %s: %s waits for an approval, but OPERATOR_CHAT_ID is not set", pending.chat_id, pending.tool)
        return
    record = await desk.open_record(pending.chat_id)
    thread = record.topic_id if record is not None else None
    name = (
        user.full_name + (f" @{user.username}" if user.username else "")
        if user is not None
        else desk.ops("op_customer")
    )
    body = desk.ops(
        "op_approval",
        tool=pending.tool,
        customer=name,
        customer_id=pending.customer.telegram_id,
        prompt=pending.prompt[:PROMPT_CHARS],
    )
    keyboard = approval_keyboard(pending.action_id, pending.chat_id, desk.ops)
    try:
        await _send(bot, desk.group, body, fence, thread=thread, reply_markup=keyboard)
    except REFUSED as exc:
        if thread is None or not topic_gone(exc):
            raise
        log.warning(
            "chat %s: its topic %s refused the approval card (%s); posted in general", pending.chat_id, thread, exc
        )
        await _send(bot, desk.group, body, fence, reply_markup=keyboard)


async def _send(
    bot: Bot, chat_id: int, body: str, fence: Fence | None, *, thread: int | None = None, reply_markup: Any = None
) -> None:
    if fence is not None:
        fence.ensure_valid()
    await bot.send_message(chat_id, body, message_thread_id=thread, reply_markup=reply_markup, parse_mode=None)
