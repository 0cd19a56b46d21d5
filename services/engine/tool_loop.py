"""The tool loop, an ``after_answer`` step: while the model answers with calls of the operator's
tools, each call is checked and carried out in order (a read runs now; a write or approval becomes a
pending decision the model can never confirm; at most ``max_calls`` a turn), its result goes back as
a ``tool`` message, and the model is asked again, until it answers in text (calls it makes all the
same are dropped). Side effects survive a retried or redelivered turn once: the ledger's record (of
the same arguments) or the call's pending decision is read first, the record written before the answer."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from prompts import actions as told
from prompts.support_chat import HANDOFF_TOOL, HANDOFF_TOOL_SPEC
from services.core.actions import ActionOutcome, Customer, PendingAction, arguments_digest, idempotency_key
from services.core.records import Completion, PromptPart, ToolCall
from services.core.tokens import TokenCounter, count_tools
from services.engine.tool_messages import ToolTranscript
from services.engine.turn_draft import TurnDraft, need, once
from services.ports.actions import ActionLedger, ActionTools
from services.ports.chat_model import ChatModel

log = logging.getLogger(__name__)

TOOL_ROOM_TOKENS = 2000
"""Held back in the window for a turn's tool calls and results (besides the tools block), a decision's
call and result told by the turn (decisions.told: within ARGUMENTS_ROOM and RESULT_ROOM) among them."""


def refused(note: str) -> ActionOutcome:
    return ActionOutcome("refused", note)


def action_calls(completion: Completion) -> tuple[ToolCall, ...]:
    """The reply's calls when it asks for actions (none when it made no call or handed over)."""
    calls = completion.tool_calls
    if not calls or any(call.name == HANDOFF_TOOL for call in calls):
        return ()
    return calls


def handoff_only(completion: Completion) -> Completion:
    """A reply that hands over, among other calls, as the handoff alone (Reply reads the first call);
    its other calls are not made."""
    handoff = next((call for call in completion.tool_calls if call.name == HANDOFF_TOOL), None)
    if handoff is None or completion.tool_calls == (handoff,):
        return completion
    return replace(completion, tool_call=handoff, tool_calls=(handoff,))


def answered(completion: Completion, pending: PendingAction | None, tools: Sequence[dict[str, Any]]) -> Completion:
    """The reply the model had to give in text (``tool_choice: none``, which Ollama and some vLLM
    parsers do not honour) without the calls it made all the same; with no text either: the decision's
    own text (the edge shows its buttons after it), else the handoff, else a fixed answer."""
    if not action_calls(completion):
        return completion
    if completion.text.strip():
        return replace(completion, tool_call=None, tool_calls=())
    if pending is not None:
        return replace(completion, text=pending.prompt, tool_call=None, tool_calls=())
    if any(tool.get("function", {}).get("name") == HANDOFF_TOOL for tool in tools):
        reason = json.dumps({"reason": "the assistant could not answer after using the tools"})
        return replace(completion, tool_call=None, tool_calls=(ToolCall(HANDOFF_TOOL, reason, "call_handoff"),))
    return replace(completion, text=told.NO_ANSWER, tool_call=None, tool_calls=())


def unique_ids(calls: tuple[ToolCall, ...], seen: set[str], round_: int) -> tuple[ToolCall, ...]:
    """``calls`` with an id no earlier call of the turn has (a server without ids gets ``call_0``...
    made up in every round: a result must answer one call only)."""
    renamed = []
    for index, call in enumerate(calls):
        call_id, tries = call.id, 0
        while not call_id or call_id in seen:
            tries += 1
            call_id = f"call_{round_}_{index}" + (f"_{tries}" if tries > 1 else "")
        seen.add(call_id)
        renamed.append(call if call_id == call.id else replace(call, id=call_id))
    return tuple(renamed)


def sent_ids(parts: Sequence[PromptPart]) -> set[str]:
    return {call.id for part in parts for call in part.tool_calls}


class ToolLoop:
    """The step (``ChatService(after_answer=[ToolLoop(...)])``). ``tools``: the operator's schemas,
    offered after the handoff's, byte-identical every turn; ``held_tokens``: what the window holds back
    for them and for the turn's calls and results."""

    def __init__(
        self,
        *,
        actions: ActionTools,
        ledger: ActionLedger,
        llm: ChatModel,
        counter: TokenCounter,
        budget: int,
        max_calls: int = 4,
        confirm_seconds: float = 600,
        approval_seconds: float = 86400,
        room_tokens: int = TOOL_ROOM_TOKENS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._actions = actions
        self._ledger = ledger
        self._llm = llm
        self._counter = counter
        self._budget = budget
        self._max_calls = max_calls
        self._confirm_seconds = confirm_seconds
        self._approval_seconds = approval_seconds
        self._clock = clock
        self.tools = tuple(actions.schemas())
        self._names = frozenset(actions.names())
        self.held_tokens = count_tools(counter, (HANDOFF_TOOL_SPEC, *self.tools)) + room_tokens

    async def run(self, draft: TurnDraft) -> None:
        completion = need(draft.completion, "completion")
        if draft.request.customer is None or not action_calls(completion):
            draft.completion = handoff_only(completion)
            return
        window = need(draft.window, "window")
        extra = draft.request.extra
        room = self._budget - window.estimated_tokens - count_tools(self._counter, draft.offered())
        transcript = ToolTranscript(self._counter, room - sum(part.tokens for part in extra), extra)
        made, rounds, seen = 0, 0, sent_ids(extra)
        while calls := action_calls(completion):
            calls, rounds = unique_ids(calls, seen, rounds), rounds + 1
            fitted = transcript.calls(completion, calls)  # a round that does not fit is not sent
            for number, call in enumerate(calls if fitted else ()):
                outcome = await self._outcome(draft, call, made)
                made += 1
                draft.actions = (*draft.actions, replace(outcome, tool=call.name))  # the metrics' label
                transcript.result(call.id, outcome, still_to_come=len(calls) - number - 1)
            answer = not fitted or made >= self._max_calls or not transcript.another_round()
            completion = await self._ask(draft, transcript, answer=answer)
            if answer:
                completion = answered(completion, draft.pending, draft.offered())
                break
        draft.completion = handoff_only(completion)

    async def _ask(self, draft: TurnDraft, transcript: ToolTranscript, *, answer: bool) -> Completion:
        """The model again, with the turn's calls and results (``answer``: it must answer in text; the
        tools block stays, so the prompt's cached prefix holds)."""
        request = draft.request
        messages = (*need(draft.window, "window").messages, *transcript.messages)
        completion = await self._llm.chat(
            messages,
            on_delta=request.on_delta,
            tools=draft.offered(),
            chat_id=request.chat_id,
            tool_choice="none" if answer else None,
        )
        draft.count(completion)
        return completion

    async def _outcome(self, draft: TurnDraft, call: ToolCall, index: int) -> ActionOutcome:
        """One call's outcome: refused, run (a read), or a decision asked for (a write, an approval)."""
        tool, customer = call.name, need(draft.request.customer, "customer")
        if index >= self._max_calls:
            return refused(told.TOO_MANY)
        if tool not in self._names:
            return refused(told.UNKNOWN_TOOL.format(tool=tool[:64]))
        checked = self._actions.check(tool, call.arguments)
        if isinstance(checked, str):
            return refused(f"Refused: {checked}")
        if self._actions.needs_phone(tool) and not customer.phone:
            draft.ask_contact = True
            return ActionOutcome("needs_contact", told.NEEDS_CONTACT)
        key = idempotency_key(draft.request.chat_id, await turn_key(draft), index, tool)
        if self._actions.risk(tool) == "read":
            return await self._read(draft, tool, checked, key)
        return await self._decision(draft, tool, checked, key)

    async def _read(self, draft: TurnDraft, tool: str, arguments: dict[str, Any], key: str) -> ActionOutcome:
        """A read, recorded under its key and its arguments' digest: a redelivered turn asking the same
        gets the recorded result; one asking about something else (the model samples again) runs."""
        request, customer = draft.request, need(draft.request.customer, "customer")
        key = f"{key}:{arguments_digest(arguments)}"
        prior = await self._ledger.recorded(request.chat_id, key)
        if prior is not None:  # a redelivered or retried turn: the recorded result, no second request
            return prior

        async def run() -> ActionOutcome:
            return await run_safely(self._actions, tool, dict(arguments), customer, None)

        outcome = await once(draft, f"action:{key}", run)
        await self._ledger.record(request.chat_id, key, outcome, fence=request.fence)
        return outcome

    async def _decision(self, draft: TurnDraft, tool: str, arguments: dict[str, Any], key: str) -> ActionOutcome:
        """A write or approval: stored as pending (the action id is its idempotency key), never run here.
        Asked before by this call (a redelivered or retried turn, a crash after storing it): that one."""
        request, customer = draft.request, need(draft.request.customer, "customer")
        chat_id = request.chat_id
        mine = await self._ledger.pending(chat_id, key)
        if mine is not None:
            return asked_again(draft, mine, arguments)
        waiting = draft.pending or next(iter(await self._ledger.open_pending(chat_id)), None)
        if waiting is not None:
            return refused(told.ONE_PENDING.format(prompt=waiting.prompt))
        now, risk = self._clock(), self._actions.risk(tool)
        seconds = self._confirm_seconds if risk == "write" else self._approval_seconds
        prompt = self._actions.prompt(tool, dict(arguments))
        pending = PendingAction(key, chat_id, tool, risk, dict(arguments), prompt, key, now, now + seconds, customer)
        await self._ledger.put_pending(pending, fence=request.fence)
        draft.pending = pending
        return asked(pending)


def asked(pending: PendingAction) -> ActionOutcome:
    """What the model is told of a decision asked for (the customer's button, an operator's approval)."""
    if pending.risk == "write":
        outcome = ActionOutcome("pending_confirmation", told.PENDING_CONFIRMATION.format(prompt=pending.prompt))
    else:
        outcome = ActionOutcome("pending_approval", told.PENDING_APPROVAL.format(prompt=pending.prompt))
    return replace(outcome, idempotency_key=pending.idempotency_key, line=waiting_line(pending.tool, pending.prompt))


def asked_again(draft: TurnDraft, pending: PendingAction, arguments: dict[str, Any]) -> ActionOutcome:
    """The call asked for ``pending`` before: its buttons are shown again while it waits; arguments
    other than those it holds are refused (the decision stays the one shown)."""
    if pending.state == "pending":
        draft.pending = pending
    if arguments_digest(arguments) != arguments_digest(pending.arguments):
        return refused(told.ASKED_OTHER.format(prompt=pending.prompt))
    return asked(pending)


async def run_safely(
    actions: ActionTools, tool: str, arguments: dict[str, Any], customer: Customer, key: str | None
) -> ActionOutcome:
    """``actions.run``, whose contract is never to raise for the API's failures; anything it raises
    all the same (a bug) is logged and told as a failure: the customer still gets an answer, and the
    failure is recorded like any outcome (a write is never sent a second time for it)."""
    try:
        return await actions.run(tool, arguments, customer, idempotency_key=key)
    except Exception:
        log.exception("action %s raised instead of returning its outcome", tool)
        return ActionOutcome("failed", "the service could not be reached", idempotency_key=key)


def waiting_line(tool: str, prompt: str) -> str:
    """The memory line of a decision asked for (the ledger's lines keep only what was done)."""
    return f"{tool}: waiting for a decision on: {prompt}"


async def turn_key(draft: TurnDraft) -> str:
    """The turn's part of an idempotency key: the update's id, or one made once for the request."""
    if draft.request.turn_id is not None:
        return draft.request.turn_id

    async def made() -> str:
        return uuid.uuid4().hex

    return await once(draft, "actions:turn", made)
