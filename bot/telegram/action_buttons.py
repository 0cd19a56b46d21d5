"""The buttons of actions: the customer's Confirm / Cancel under a write's code-rendered text, the
operators' Approve / Reject on an approval card, the share-contact keyboard, and the callback data
they carry (at most 64 bytes, Telegram's limit). Callback data is read as hostile input: a modified
client can send any; the handlers check the action against the ledger before anything is decided."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from aiogram.types import (
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    KeyboardButton,
    ReplyKeyboardMarkup,
    ReplyKeyboardRemove,
)

from bot.telegram.texts import Texts

PREFIX = "act"
CALLBACK_DATA_LIMIT = 64
"""Bytes Telegram allows in an inline button's callback_data."""

Verb = Literal["confirm", "cancel", "approve", "reject"]
_CODES: dict[Verb, str] = {"confirm": "y", "cancel": "n", "approve": "a", "reject": "r"}
_VERBS: dict[str, Verb] = {code: verb for verb, code in _CODES.items()}
CUSTOMER_VERBS = frozenset({"confirm", "cancel"})
OPERATOR_VERBS = frozenset({"approve", "reject"})


@dataclass(frozen=True, slots=True)
class Press:
    """What a button press asks: ``chat_id`` is the customer's chat for an operator's press (the
    card is in the operators' group), None for the customer's own (the chat of the pressed message)."""

    verb: Verb
    action_id: str
    chat_id: int | None = None

    @property
    def by_operator(self) -> bool:
        return self.verb in OPERATOR_VERBS


def callback_data(verb: Verb, action_id: str, chat_id: int | None = None) -> str:
    """``act:<y|n>:<action id>`` (the customer's) or ``act:<a|r>:<chat id>:<action id>`` (an operator's)."""
    if (chat_id is None) != (verb in CUSTOMER_VERBS):
        raise ValueError(f"{verb}: the customer's buttons carry no chat id, the operators' one")
    middle = "" if chat_id is None else f"{chat_id}:"
    data = f"{PREFIX}:{_CODES[verb]}:{middle}{action_id}"
    if not action_id or len(data.encode()) > CALLBACK_DATA_LIMIT:
        raise ValueError(
            f"action id {action_id[:80]!r} does not fit a button's {CALLBACK_DATA_LIMIT}-byte callback data"
        )
    return data


def read_press(data: str | None) -> Press | None:
    """The press a callback's data asks for, or None (not an action button, or malformed)."""
    if not data or len(data) > CALLBACK_DATA_LIMIT or not data.startswith(f"{PREFIX}:"):
        return None
    parts = data.split(":", 2)
    verb = _VERBS.get(parts[1]) if len(parts) == 3 else None
    if verb is None:
        return None
    rest = parts[2]
    if verb in CUSTOMER_VERBS:
        return Press(verb, rest) if rest else None
    chat, _, action_id = rest.partition(":")
    digits = chat[1:] if chat.startswith("-") else chat
    if not (digits.isascii() and digits.isdigit()) or not action_id:
        return None
    return Press(verb, action_id, int(chat))


async def is_customer_press(query: CallbackQuery) -> bool:
    """The filter of the customer's Confirm / Cancel (a coroutine: aiogram runs plain callables in a thread)."""
    press = read_press(query.data)
    return press is not None and not press.by_operator


async def is_operator_press(query: CallbackQuery) -> bool:
    press = read_press(query.data)
    return press is not None and press.by_operator


def confirm_keyboard(action_id: str, say: Texts) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(
        inline_keyboard=[
            [
                InlineKeyboardButton(text=say("action_confirm"), callback_data=callback_data("confirm", action_id)),
                InlineKeyboardButton(text=say("action_cancel"), callback_data=callback_data("cancel", action_id)),
            ]
        ]
    )


def approval_keyboard(action_id: str, chat_id: int, ops: Callable[[str], str]) -> InlineKeyboardMarkup:
    approve = callback_data("approve", action_id, chat_id)
    reject = callback_data("reject", action_id, chat_id)
    return InlineKeyboardMarkup(
        inline_keyboard=[
            [
                InlineKeyboardButton(text=ops("op_approve"), callback_data=approve),
                InlineKeyboardButton(text=ops("op_reject"), callback_data=reject),
            ]
        ]
    )


def contact_keyboard(say: Texts) -> ReplyKeyboardMarkup:
    """One button sharing the customer's own number (Telegram's request_contact), gone after one use."""
    button = KeyboardButton(text=say("contact_button"), request_contact=True)
    return ReplyKeyboardMarkup(keyboard=[[button]], one_time_keyboard=True, resize_keyboard=True)


NO_KEYBOARD = ReplyKeyboardRemove()
