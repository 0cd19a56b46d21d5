"""The actions' buttons and the shared contact. A customer's Confirm / Cancel and an operator's Approve
/ Reject (queued mode: intake puts the operator's press into the customer chat's inbox, so the action
runs in that chat's order, under its lease, in any worker, after any restart) are decided by the
ledger (``decide``: exactly one caller moves a decision); the action then runs in the customer's chat
(``ChatService.carry_out``) and its turn is shown like any other. A contact is accepted only as the
sender's own; the conversation then goes on with a note that the number was shared."""

from __future__ import annotations

import contextlib
import logging
import time

from aiogram import Bot, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.types import CallbackQuery, Message, ReplyKeyboardMarkup, ReplyKeyboardRemove, Update, User

from bot.metrics import APPROVALS, CONFIRMATIONS
from bot.settings import BotSettings
from bot.telegram.action_buttons import (
    NO_KEYBOARD,
    Press,
    contact_keyboard,
    is_customer_press,
    is_operator_press,
    read_press,
)
from bot.telegram.desk import HandoffDesk
from bot.telegram.handlers.chat import TurnPlace, deliver_turn, serve_turn
from bot.telegram.link_hosts import LinkPolicy
from bot.telegram.middlewares.ratelimit import RateLimitMiddleware
from bot.telegram.optional import OptionalCallFailed
from bot.telegram.texts import Texts, pick_language
from prompts.actions import CONTACT_SHARED
from services.core.actions import Customer, PendingAction, PendingState, Risk
from services.core.fence import Fence
from services.core.records import OnDelta, OnRestart
from services.core.turns import PendingTurn
from services.engine.chat import ChatService
from services.ports.actions import ActionLedger
from services.ports.backend import Backend
from services.ports.queue import item_id_of

log = logging.getLogger(__name__)

_TOASTS = {"confirmed": "action_confirmed", "declined": "action_cancelled"}


async def on_customer_press(
    query: CallbackQuery,
    bot: Bot,
    chat: ChatService,
    backend: Backend,
    settings: BotSettings,
    desk: HandoffDesk,
    event_update: Update,
    fence: Fence | None = None,
    links: LinkPolicy | None = None,
    attempt: int = 1,
) -> None:
    """Confirm / Cancel under a write's text, in the customer's chat (``attempt``: of this update,
    queued mode)."""
    press = read_press(query.data)
    message = query.message
    say = Texts.for_user(query.from_user, settings)
    if press is None or not isinstance(message, Message):  # a message too old for Telegram to give
        await _toast(query, say("action_gone"))
        return
    chat_id = message.chat.id
    state: PendingState = "confirmed" if press.verb == "confirm" else "declined"
    pending = await _decide(
        backend.actions, chat_id, press, state, risk="write", by=query.from_user, serialized=True, retried=attempt > 1
    )
    await _toast(query, say("action_gone" if pending is None else _TOASTS[state]))
    await _drop_buttons(bot, message)
    if pending is None:
        await _send(bot, chat_id, say("action_gone"), fence)
        return
    CONFIRMATIONS.labels("accepted" if state == "confirmed" else "declined").inc()
    where = TurnPlace(chat_id, query.from_user, message.message_id, private=message.chat.type == "private")
    await _carry_out(bot, chat, settings, say, desk, where, pending, event_update, fence, links)


async def on_operator_press(
    query: CallbackQuery,
    bot: Bot,
    chat: ChatService,
    backend: Backend,
    settings: BotSettings,
    desk: HandoffDesk,
    event_update: Update,
    fence: Fence | None = None,
    links: LinkPolicy | None = None,
    attempt: int = 1,
) -> None:
    """Approve / Reject on a card in the operators' group (any member of it); the action runs in the
    customer's chat, whose inbox this update was queued in (queued mode)."""
    press = read_press(query.data)
    message = query.message
    in_group = isinstance(message, Message) and desk.is_operator_group(message.chat.id)
    if press is None or press.chat_id is None or not in_group or not isinstance(message, Message):
        await _toast(query, desk.ops("action_gone"))
        return
    state: PendingState = "approved" if press.verb == "approve" else "declined"
    # two operators' presses in one process (no queue) are not serialized: only the decider carries it out
    pending = await _decide(
        backend.actions, press.chat_id, press, state, risk="approval", serialized=fence is not None, retried=attempt > 1
    )
    if pending is None:
        await _toast(query, desk.ops("action_gone"))
        await _drop_buttons(bot, message)
        return
    by = _name(query.from_user)
    line = desk.ops("op_approved" if state == "approved" else "op_rejected", name=by)
    await _toast(query, line)
    await _mark_card(bot, message, line)
    APPROVALS.labels("approved" if state == "approved" else "rejected").inc()
    log.info("chat %s: %s %s by operator %s", press.chat_id, pending.tool, state, query.from_user.id)
    say = Texts(pick_language(settings.default_language, "en"))  # the customer is not the one pressing
    where = TurnPlace(press.chat_id, None, event_update.update_id, private=press.chat_id > 0)
    await _carry_out(bot, chat, settings, say, desk, where, pending, event_update, fence, links)


async def _decide(
    ledger: ActionLedger,
    chat_id: int,
    press: Press,
    state: PendingState,
    *,
    risk: Risk,
    by: User | None = None,
    serialized: bool,
    retried: bool,
) -> PendingAction | None:
    """The decision this press makes, or None: no such action of this kind (of this customer), decided
    before, or expired. ``serialized``: presses of this decision are handled one at a time (the chat's
    order), so one already moved to ``state`` and not done is a dead attempt's, and with ``retried``
    (this update was tried before, queued mode) so is one done: either is carried out now."""
    known = await ledger.pending(chat_id, press.action_id)
    if known is None or known.risk != risk or (by is not None and known.customer.telegram_id != by.id):
        return None  # a forged press (a customer "confirming" an approval, another chat's action) decides nothing
    decided = await ledger.decide(chat_id, press.action_id, state, now=time.time())
    if decided is not None:
        return decided
    if serialized and (known.state == state or (retried and _done_as(known, state))):
        # this update's earlier attempt decided it (and maybe ran it) and died before the customer was
        # told: carried out now (a done action's recorded outcome is told, nothing is run again)
        log.warning("chat %s: %s was %s by an attempt that died; carried out now", chat_id, press.action_id, state)
        return known
    if risk == "write" and (known.state == "expired" or (known.state == "pending" and time.time() >= known.expires)):
        CONFIRMATIONS.labels("expired").inc()
    return None


def _done_as(known: PendingAction, state: PendingState) -> bool:
    """``known`` is done the way ``state`` decides it (run, or dropped by a cancel / a rejection)."""
    kind = known.result.kind if known.state == "done" and known.result is not None else None
    return kind is not None and kind != "expired" and (kind == "declined") == (state == "declined")


async def _carry_out(
    bot: Bot,
    chat: ChatService,
    settings: BotSettings,
    say: Texts,
    desk: HandoffDesk,
    where: TurnPlace,
    pending: PendingAction,
    event_update: Update,
    fence: Fence | None,
    links: LinkPolicy | None,
) -> None:
    """Run the decided action once and go on with the conversation, shown like any turn."""
    turn_id = item_id_of(event_update.update_id)

    async def produce(on_delta: OnDelta | None, on_restart: OnRestart | None) -> PendingTurn | None:
        return await chat.carry_out(
            where.chat_id, pending.action_id, turn_id=turn_id, customer=pending.customer, fence=fence, on_delta=on_delta
        )

    await deliver_turn(bot, chat, settings, say, desk, where, turn_id, produce, fence, links)


async def has_contact(message: Message) -> bool:
    """A shared contact in a private chat (the share-contact button works there only)."""
    return message.contact is not None and message.chat.type == "private"


async def on_contact(
    message: Message,
    bot: Bot,
    chat: ChatService,
    backend: Backend,
    settings: BotSettings,
    say: Texts,
    event_update: Update,
    desk: HandoffDesk,
    fence: Fence | None = None,
    links: LinkPolicy | None = None,
) -> None:
    """The customer's own number only (a contact card of someone else, forwarded or typed in, is
    refused): remembered for the session, the keyboard removed, and the conversation goes on."""
    contact, user, chat_id = message.contact, message.from_user, message.chat.id
    if contact is None or user is None or contact.user_id != user.id:
        await _send(bot, chat_id, say("contact_not_own"), fence, reply_markup=contact_keyboard(say))
        return
    phone = contact.phone_number.strip()
    if fence is not None:
        fence.ensure_valid()
    await backend.actions.set_phone(chat_id, phone)
    await _send(bot, chat_id, say("contact_saved"), fence, reply_markup=NO_KEYBOARD)
    customer = Customer(telegram_id=user.id, phone=phone)
    await serve_turn(
        message,
        bot,
        chat,
        settings,
        say,
        event_update,
        desk,
        CONTACT_SHARED,
        fence=fence,
        links=links,
        customer=customer,
    )


def _name(user: User) -> str:
    return f"@{user.username}" if user.username else user.full_name


async def _toast(query: CallbackQuery, body: str) -> None:
    """The press answered (Telegram shows a spinner until it is); best effort: a late answer is refused."""
    with contextlib.suppress(OptionalCallFailed):
        await query.answer(body)


async def _drop_buttons(bot: Bot, message: Message) -> None:
    """The pressed message without its buttons (best effort)."""
    with contextlib.suppress(OptionalCallFailed):
        await bot.edit_message_reply_markup(chat_id=message.chat.id, message_id=message.message_id)


async def _mark_card(bot: Bot, card: Message, line: str) -> None:
    """The card says who decided, and loses its buttons (an edit without a keyboard removes it)."""
    try:
        await bot.edit_message_text(
            chat_id=card.chat.id, message_id=card.message_id, text=f"{card.text or ''}\n\n{line}", parse_mode=None
        )
    except TelegramAPIError as exc:  # "not modified" on a retried press, a card too old to edit
        log.info("approval card %s not edited: %s", card.message_id, exc)
        await _drop_buttons(bot, card)


async def _send(
    bot: Bot,
    chat_id: int,
    body: str,
    fence: Fence | None,
    *,
    reply_markup: ReplyKeyboardMarkup | ReplyKeyboardRemove | None = None,
) -> None:
    if fence is not None:
        fence.ensure_valid()
    await bot.send_message(chat_id, body, parse_mode=None, reply_markup=reply_markup)


def make_router() -> Router:
    router = Router(name="actions")
    router.callback_query.register(on_customer_press, is_customer_press)
    router.callback_query.register(on_operator_press, is_operator_press)
    router.message.middleware(RateLimitMiddleware())  # a shared contact starts a turn like a message
    router.message.register(on_contact, has_contact)
    return router
