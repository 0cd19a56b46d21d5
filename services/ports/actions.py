"""The contracts of actions: the tools the operator declared (``ActionTools``: their schemas for the
model, checking a call, running it safely) and the durable ledger of what they did (``ActionLedger``:
recorded results by idempotency key, pending confirmations and approvals, the shared phone number)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from services.core.actions import ActionOutcome, Customer, PendingAction, PendingState, Risk
from services.core.fence import Fence


class ActionTools(Protocol):
    """The operator's tools (ACTIONS_FILE), loaded and checked once at start-up."""

    def schemas(self) -> Sequence[dict[str, Any]]:
        """The Chat Completions ``tools`` entries, strict, in the file's order: byte-identical every
        turn (the provider's prompt cache holds)."""
        ...

    def names(self) -> Sequence[str]: ...

    def risk(self, tool: str) -> Risk: ...

    def needs_phone(self, tool: str) -> bool:
        """Whether the tool's request uses ``{customer.phone}``."""
        ...

    def check(self, tool: str, arguments: str) -> dict[str, Any] | str:
        """The validated arguments, or why the call is refused (unknown tool, not JSON, an unknown or
        extra argument, a pattern mismatch): the refusal is told to the model, nothing is requested."""
        ...

    def prompt(self, tool: str, arguments: dict[str, Any]) -> str:
        """The code-rendered text a person decides on (the tool's ``confirm`` / approval card text)."""
        ...

    async def run(
        self, tool: str, arguments: dict[str, Any], customer: Customer, *, idempotency_key: str | None
    ) -> ActionOutcome:
        """Make the request (declared hosts only, checked addresses, no redirects, bounded time and
        size) and project the response. Never raises for a failure of the operator's API: it becomes
        an outcome the model can explain. ``idempotency_key`` goes as the Idempotency-Key header."""
        ...


class ActionLedger(Protocol):
    """Per chat, durable (Redis in queued mode): what actions did, so a redelivered update, a retried
    turn or a restarted worker returns the recorded result instead of calling again; the pending
    decisions; and the phone number the customer shared. ``forget`` (from ``Backend.forget_chat``)
    deletes all of it."""

    async def recorded(self, chat_id: int, key: str) -> ActionOutcome | None:
        """The outcome recorded under an idempotency key (None: never recorded)."""
        ...

    async def record(self, chat_id: int, key: str, outcome: ActionOutcome, *, fence: Fence | None = None) -> None:
        """Record an outcome before the bot answers (first writer wins: a second record keeps the first)."""
        ...

    async def put_pending(self, pending: PendingAction, *, fence: Fence | None = None) -> None: ...

    async def pending(self, chat_id: int, action_id: str) -> PendingAction | None: ...

    async def open_pending(self, chat_id: int) -> list[PendingAction]:
        """Pending decisions of the chat still in state ``pending`` (the ticket lists them)."""
        ...

    async def decide(self, chat_id: int, action_id: str, state: PendingState, *, now: float) -> PendingAction | None:
        """Move a pending action from ``pending`` to ``state`` atomically (confirmed, approved,
        declined, expired): the caller that moved it gets it back, every later caller gets None (two
        presses, two workers, a redelivery: one decision). Past ``expires`` only ``expired`` moves it."""
        ...

    async def finish(self, chat_id: int, action_id: str, outcome: ActionOutcome) -> None:
        """The decided action ran (or was dropped): its outcome kept, state ``done``."""
        ...

    async def lines(self, chat_id: int) -> list[str]:
        """The compact lines of the actions taken in this conversation (the handoff ticket)."""
        ...

    async def set_phone(self, chat_id: int, phone: str) -> None: ...

    async def phone(self, chat_id: int) -> str | None: ...

    async def forget(self, chat_id: int) -> None: ...
