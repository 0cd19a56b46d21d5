"""Pending actions after a person decided (``ChatService.carry_out``): a confirmed or approved action
run exactly once (the ledger's record by its idempotency key is read first), a declined or expired
one dropped, each told to the model in the next turn as the result of the call that asked for it;
decisions nobody made in time expired at the chat's next turn; the ticket's lines."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from prompts import actions as told
from services.core.actions import ActionOutcome, Customer, PendingAction, arguments_digest
from services.core.fence import Fence
from services.core.records import PromptPart, ToolCall
from services.core.tokens import TokenCounter
from services.engine.tool_loop import run_safely
from services.engine.tool_messages import calls_part, result_part
from services.ports.actions import ActionLedger, ActionTools

RESULT_ROOM = 1000
"""Tokens a decision's result may take in the turn that tells it."""
ARGUMENTS_ROOM = 300
"""Tokens the call that asked for a decision may take when a turn replays it; longer arguments (a long
text the model wrote) are replayed as their digest: the turn's event names what was decided. With
RESULT_ROOM, a decision told stays within the room the window holds back for a turn's tool calls and
results (tool_loop.TOOL_ROOM_TOKENS), so its turn stays within CHAT_INPUT_TOKEN_BUDGET."""


@dataclass(frozen=True, slots=True)
class Told:
    """What a turn tells the model of decisions: the outcomes (memory lines) and the messages (the
    call that asked, its result) that follow the turn's customer part."""

    outcomes: tuple[ActionOutcome, ...] = ()
    messages: tuple[PromptPart, ...] = ()


def dropped_line(pending: PendingAction, why: str) -> str:
    return f"{pending.tool}: not done ({why}): {pending.prompt}"


class Decisions:
    def __init__(
        self,
        *,
        actions: ActionTools,
        ledger: ActionLedger,
        counter: TokenCounter,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._actions = actions
        self.ledger = ledger
        self._counter = counter
        self._clock = clock

    async def customer(self, chat_id: int, customer: Customer) -> Customer:
        """``customer`` with the phone number they shared earlier in this chat (if any)."""
        if customer.phone:
            return customer
        phone = await self.ledger.phone(chat_id)
        return replace(customer, phone=phone) if phone else customer

    async def expire(self, chat_id: int) -> Told:
        """Decisions past their time moved to ``expired`` (each by one caller), dropped and told."""
        now = self._clock()
        outcomes: list[ActionOutcome] = []
        messages: list[PromptPart] = []
        for pending in await self.ledger.open_pending(chat_id):
            if pending.expires > now:
                continue
            expired = await self.ledger.decide(chat_id, pending.action_id, "expired", now=now)
            if expired is None:
                continue
            outcome = self.dropped(expired)
            await self.ledger.finish(chat_id, pending.action_id, outcome)
            outcomes.append(outcome)
            messages += self.told(pending, outcome)
        return Told(tuple(outcomes), tuple(messages))

    async def carry(
        self, chat_id: int, action_id: str, *, fence: Fence | None = None
    ) -> tuple[PendingAction, ActionOutcome] | None:
        """The decided action carried out once: (it, its outcome); None when it is still pending or
        unknown. Done earlier (a redelivery): its recorded outcome, nothing run again."""
        pending = await self.ledger.pending(chat_id, action_id)
        if pending is None or pending.state == "pending":
            return None
        key = pending.idempotency_key
        if pending.state == "done":
            recorded = await self.ledger.recorded(chat_id, key)
            outcome = recorded or pending.result
            return (pending, outcome) if outcome is not None else None
        if pending.state in ("confirmed", "approved"):
            outcome = await self.ledger.recorded(chat_id, key)
            if outcome is None:
                outcome = await run_safely(self._actions, pending.tool, dict(pending.arguments), pending.customer, key)
                await self.ledger.record(chat_id, key, outcome, fence=fence)
            await self.ledger.finish(chat_id, action_id, replace(outcome, line=""))  # the line is recorded
            return pending, outcome
        outcome = self.dropped(pending)
        await self.ledger.finish(chat_id, action_id, outcome)
        return pending, outcome

    @staticmethod
    def dropped(pending: PendingAction) -> ActionOutcome:
        if pending.state == "expired":
            note = told.EXPIRED.format(minutes=max(1, round((pending.expires - pending.created) / 60)))
            return ActionOutcome("expired", note, line=dropped_line(pending, "expired"))
        if pending.risk == "approval":
            return ActionOutcome("declined", told.REJECTED, line=dropped_line(pending, "rejected by an operator"))
        return ActionOutcome("declined", told.DECLINED, line=dropped_line(pending, "cancelled by the customer"))

    @staticmethod
    def event(pending: PendingAction, outcome: ActionOutcome) -> str:
        """The customer part of the turn that tells a decision (prompts/actions.py: EVENTS)."""
        state = pending.state if pending.state != "done" else _decided(pending, outcome)
        if state == "declined" and pending.risk == "approval":
            state = "rejected"
        return told.EVENTS.get(state, told.EVENTS["expired"]).format(prompt=pending.prompt)

    def told(self, pending: PendingAction, outcome: ActionOutcome) -> tuple[PromptPart, PromptPart]:
        """The call that asked for ``pending`` and its outcome, as the messages a turn sends (within
        ARGUMENTS_ROOM and RESULT_ROOM)."""
        call = ToolCall(pending.tool, json.dumps(pending.arguments, ensure_ascii=False), call_id(pending))
        asked = calls_part(self._counter, "", (call,))
        if asked.tokens > ARGUMENTS_ROOM:
            digest = json.dumps({"arguments_digest": arguments_digest(pending.arguments)})
            call = replace(call, arguments=digest)
            asked = calls_part(self._counter, "", (call,))
        return asked, result_part(self._counter, call.id, outcome, RESULT_ROOM)


def _decided(pending: PendingAction, outcome: ActionOutcome) -> str:
    if outcome.kind == "expired":
        return "expired"
    if outcome.kind == "declined":
        return "declined"
    return "approved" if pending.risk == "approval" else "confirmed"


def call_id(pending: PendingAction) -> str:
    """The id of the call that asked for ``pending`` as a decision's turn sends it back."""
    return f"call_{pending.action_id[:24]}"


async def ticket_actions(ledger: ActionLedger, chat_id: int) -> tuple[list[str], list[str]]:
    """For the handoff ticket: the lines of the actions taken, and the decisions still open (their
    prompt and who decides)."""
    lines = await ledger.lines(chat_id)
    waiting = [
        f"{p.prompt} ({'customer to confirm' if p.risk == 'write' else 'operator to approve'})"
        for p in await ledger.open_pending(chat_id)
    ]
    return lines, waiting
