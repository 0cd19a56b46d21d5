"""Plain data of actions (ACTIONS_FILE): who the customer is (filled by code, never by the model), a
call the model asked for, what running it gave, and a write waiting for the customer's button or an
operator's approval. The engine, the backends, the Telegram edge and the action runner share these."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Risk = Literal["read", "write", "approval"]

OutcomeKind = Literal[
    "ok",  # the operator's API answered 2xx: ``data`` is the projected result
    "refused",  # not requested: arguments invalid, host refused, too many calls, no identity...
    "failed",  # requested, and the API answered 4xx/5xx, a malformed or oversize body
    "timeout",  # requested, no complete answer in time
    "pending_confirmation",  # a write waiting for the customer's button
    "pending_approval",  # waiting for an operator's decision
    "needs_contact",  # the tool needs {customer.phone}: the share-contact button is shown
    "declined",  # the customer pressed cancel, or an operator rejected it
    "expired",  # no button pressed within ACTIONS_CONFIRM_SECONDS (an approval: ACTIONS_APPROVAL_SECONDS)
]

PendingState = Literal["pending", "confirmed", "approved", "declined", "expired", "done"]


@dataclass(frozen=True, slots=True)
class Customer:
    """The customer an action acts for, taken from the Telegram update by code: the model never sets
    or overrides any of it (``{customer.*}`` placeholders read only this)."""

    telegram_id: int
    phone: str | None = None
    """Shared with Telegram's own share-contact button, by the sender themselves (None: not shared)."""


@dataclass(frozen=True, slots=True)
class ActionCall:
    """One tool call of the model, as it wrote it (``arguments`` is its JSON text, not yet validated)."""

    call_id: str
    tool: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    """What one call gave, as the model is told (``note``) and the memory keeps it (``line``)."""

    kind: OutcomeKind
    note: str
    """The short text the model reads as the tool's result (a data block, hardened by the engine)."""
    data: Any = None
    """The projected response (only the ``result`` fields the file lists); None unless ``ok``."""
    status: int | None = None
    """The operator's API's HTTP status (None: nothing was requested or no answer)."""
    seconds: float = 0.0
    idempotency_key: str | None = None
    line: str = ""
    """The compact line the turn keeps in memory ("order_status 5521: shipped, eta 2026-12-06")."""
    tool: str = ""
    """The tool's name as the operator's file declares it (the metrics' label; never an argument)."""

    @property
    def requested(self) -> bool:
        return self.kind in ("ok", "failed", "timeout")


@dataclass(frozen=True, slots=True)
class PendingAction:
    """A write or approval call that runs only after a person decides: the customer's button
    (``write``) or an operator's (``approval``). Stored in Redis so any worker, after any restart,
    carries the decision out exactly once (``idempotency_key`` goes with the request)."""

    action_id: str
    chat_id: int
    tool: str
    risk: Risk
    arguments: dict[str, Any]
    """The validated arguments (checked against the tool's schema before this was stored)."""
    prompt: str
    """The code-rendered text the person decides on (the tool's ``confirm`` or its approval card)."""
    idempotency_key: str
    created: float
    expires: float
    customer: Customer
    state: PendingState = "pending"
    result: ActionOutcome | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Edge data kept with it (e.g. the message id of the buttons, the operators' card)."""


def idempotency_key(chat_id: int, turn_id: str, call_index: int, tool: str) -> str:
    """The request's Idempotency-Key: from the chat, the turn (the update's id, the same on every
    redelivery) and the call's place in the turn, never from text the model writes (a model rewords
    its arguments on a retry; the key must not change)."""
    raw = f"{chat_id}:{turn_id}:{call_index}:{tool}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """The digest of a call's checked arguments (the same arguments, the same digest, whatever their
    order): what tells a redelivered turn's call from one asking about something else."""
    raw = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:24]
