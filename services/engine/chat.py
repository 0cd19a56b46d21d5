"""Chat orchestration: one customer message in, one reply out, memory kept within the token budget."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from prompts.support_chat import HANDOFF_MARK, HANDOFF_TOOL_SPEC
from services.core.actions import ActionOutcome, Customer
from services.core.errors import ConfigurationError, CorruptSessionError, MessageTooLongError, StoreError
from services.core.fence import Fence
from services.core.prompt_format import clean_text
from services.core.records import OnDelta, OnRestart, PromptPart, Session
from services.core.tokens import TokenCounter
from services.core.turn_media import TurnMedia
from services.core.turns import CompactionReport, NoObserver, PendingTurn, TurnResult
from services.engine.decisions import Decisions
from services.engine.grounding import Grounding
from services.engine.turn_steps import (
    TurnDraft,
    TurnParts,
    TurnRequest,
    TurnStep,
    offered_tools,
    quarantine,
    run_turn,
    turn_steps,
)
from services.engine.turn_window import TurnWindow
from services.media.notes import NOTE_WAIT_SECONDS, ImageNotes
from services.media.prompt_parts import turn_part
from services.media.source import MediaSource
from services.memory.compactor import Compactor
from services.memory.policy import CompactionPolicy
from services.memory.summarizer import Summarizer
from services.memory.window import fixed_cost
from services.ports.chat_model import ChatModel
from services.ports.observer import TurnObserver
from services.ports.sessions import SessionStore, TurnStatus

log = logging.getLogger(__name__)


Deliver = Callable[[TurnResult], Awaitable[None]]


class ChatService:
    """Produces turns: the facade over the turn's steps (``steps``, services.engine.turn_steps: the
    budgeted prompt, the knowledge, the model's reply, the atomic commit), with redelivery bookkeeping
    for queued updates; its ``compactor`` folds memory."""

    def __init__(
        self,
        *,
        store: SessionStore,
        llm: ChatModel,
        summarizer: Summarizer,
        counter: TokenCounter,
        instruction: str,
        instruction_role: str,
        budget: int,
        summary_max_tokens: int,
        policy: CompactionPolicy,
        commit_attempts: int = 3,
        max_message_chars: int = 4096,
        observer: TurnObserver | None = None,
        handoff_tool: bool = False,
        grounding: Grounding | None = None,
        notes: ImageNotes | None = None,
        note_wait: float = NOTE_WAIT_SECONDS,
        after_answer: Sequence[TurnStep] = (),
        decisions: Decisions | None = None,
    ) -> None:
        """``after_answer``: steps run between the model's answer and the reply made of it (a tool
        loop); the tools they name (their ``tools``) are offered to the model with the handoff's, in
        a turn with a customer, and the window holds back their ``held_tokens``. ``decisions``: with
        actions, the pending decisions carried out (``carry_out``) and expired."""
        self._store = store
        self.summarizer = summarizer
        self._llm = llm
        self._counter = counter
        self._instruction = PromptPart(
            instruction_role, instruction, counter.count_message(instruction_role, instruction)
        )
        knowledge_room = grounding.budget if grounding is not None else 0
        # the knowledge room is always held back, found passages or not: which history fits does not
        # depend on retrieval, so the prompt's prefix stays the same from turn to turn
        self._budget = budget - knowledge_room - sum(getattr(step, "held_tokens", 0) for step in after_answer)
        self._decisions = decisions
        self._commit_attempts = commit_attempts
        self._max_message_chars = max_message_chars
        self._observer = observer or NoObserver()
        self._windows = TurnWindow(instruction=self._instruction, budget=self._budget, counter=counter)
        history_room = self._history_room(budget, summary_max_tokens, grounding)
        self.compactor = Compactor(store=store, summarizer=summarizer, policy=policy, history_room=history_room)
        parts = TurnParts(
            store=store,
            windows=self._windows,
            compactor=self.compactor,
            summary_part=self._summary_part,
            llm=llm,
            counter=counter,
            grounding=grounding,
            notes=notes,
            note_wait=note_wait,
        )
        self.steps = turn_steps(parts, after_answer=after_answer)
        """The turn's steps, in order."""
        self._bare_tools: tuple[dict[str, Any], ...] = (HANDOFF_TOOL_SPEC,) if handoff_tool else ()
        """Offered in a turn without a customer (a group's) when the steps' tools need one."""
        self._tools: tuple[dict[str, Any], ...] = (*self._bare_tools, *offered_tools(self.steps))

    def _history_room(self, budget: int, summary_max_tokens: int, grounding: Grounding | None) -> int:
        """The tokens left for the history; ConfigurationError when none are."""
        history_room = self._budget - fixed_cost(self._instruction, []) - summary_max_tokens
        if history_room <= 0:
            raise ConfigurationError(
                f"CHAT_INPUT_TOKEN_BUDGET={budget} leaves no room for history: the instruction takes "
                f"{self._instruction.tokens} tokens, SUMMARY_MAX_TOKENS={summary_max_tokens}"
                + (f" and KNOWLEDGE_TOKEN_BUDGET={grounding.budget}" if grounding is not None else "")
            )
        return history_room

    async def handle(
        self,
        chat_id: int,
        text: str,
        *,
        deliver: Deliver,
        on_delta: OnDelta | None = None,
        on_restart: OnRestart | None = None,
        turn_id: str | None = None,
        fence: Fence | None = None,
        media: TurnMedia | None = None,
    ) -> TurnResult:
        """``begin``, hand the reply (if any) to ``deliver``, then ``finish``: the whole turn in one
        call, for callers that deliver in a callback (the console, the evaluation)."""
        turn = await self.begin(
            chat_id, text, on_delta=on_delta, on_restart=on_restart, turn_id=turn_id, fence=fence, media=media
        )
        if turn.deliver:
            await deliver(turn.result)
        return await self.finish(turn, fence=fence)

    async def begin(
        self,
        chat_id: int,
        text: str,
        *,
        on_delta: OnDelta | None = None,
        on_restart: OnRestart | None = None,
        turn_id: str | None = None,
        fence: Fence | None = None,
        media: TurnMedia | None = None,
        media_source: MediaSource | None = None,
        customer: Customer | None = None,
    ) -> PendingTurn:
        """Produce the turn and commit it; the caller sends ``result`` if ``deliver``, then calls
        ``finish``, which records the reply as sent and compacts memory if it passed the high-water
        mark, so the customer never waits for compaction.

        With a ``turn_id`` (the update id) a redelivered message is recognised: a turn already
        answered is skipped; a turn committed but maybe not answered gets its stored reply again.
        With a ``fence`` (queued mode) every write is fenced by the chat's lease and nothing is
        to be delivered once the lease may have expired (LeaseLostError). ``media_source`` (instead of
        ``media``): read once the turn is new and ``text`` within its limit, so a redelivered turn
        downloads nothing and a caption too long is refused before any download. ``customer``: who
        actions act for (from the update; None in groups: no actions are offered)."""
        quarantined = False
        session: Session | None = None
        if turn_id is not None:
            try:
                status, session = await self._store.load_turn(chat_id, turn_id)
            except CorruptSessionError:
                # the session is unreadable, but the turn's own record may not be: a reply committed
                # and not yet sent is still sent (the FitWindow step quarantines the session when it loads it)
                known = await self._turn_status_or_quarantine(chat_id, turn_id, fence)
                quarantined = known is None
                status = known or TurnStatus()
            if status.replied:
                return PendingTurn(chat_id, turn_id, TurnResult(reply="", duplicate=True))
            if status.committed:
                return await self._redeliver(chat_id, turn_id, status, fence)
        if media_source is not None:
            self._check_length(text)
            media = await media_source.read(chat_id)
        result = await self.respond(
            chat_id,
            text,
            on_delta=on_delta,
            on_restart=on_restart,
            turn_id=turn_id,
            fence=fence,
            loaded=session,
            media=media,
            customer=customer,
        )
        if quarantined:
            result = replace(result, quarantined=True)
        return await self._produced(chat_id, turn_id, result, fence)

    async def _produced(
        self, chat_id: int, turn_id: str | None, result: TurnResult, fence: Fence | None
    ) -> PendingTurn:
        """The pending turn of a committed result (another worker's commit meanwhile: its reply)."""
        if turn_id is not None and result.duplicate:  # another worker committed it meanwhile
            status = await self._store.turn_status(chat_id, turn_id)
            if status.replied:
                return PendingTurn(chat_id, turn_id, result)
            return await self._redeliver(chat_id, turn_id, status, fence)
        if fence is not None:
            fence.ensure_valid()
        return PendingTurn(chat_id, turn_id, result, deliver=True, after="answered")

    async def carry_out(
        self,
        chat_id: int,
        action_id: str,
        *,
        turn_id: str,
        customer: Customer,
        fence: Fence | None = None,
        on_delta: OnDelta | None = None,
    ) -> PendingTurn | None:
        """After the edge moved a pending action with ``ledger.decide``: run it exactly once
        (confirmed, approved) or drop it (declined, expired), and continue the conversation with a
        turn whose customer part is the event (prompts/actions.py) and whose tool result is the
        outcome, so the model tells the customer. The caller sends it and calls ``finish`` as for any
        turn. None when there is nothing to do (still pending, unknown, or that turn already answered)."""
        if self._decisions is None:
            return None
        status, session = await self._store.load_turn(chat_id, turn_id)
        if status.replied:
            return None
        if status.committed:
            return await self._redeliver(chat_id, turn_id, status, fence)
        carried = await self._decisions.carry(chat_id, action_id, fence=fence)
        if carried is None:
            return None
        pending, outcome = carried
        result = await self.respond(
            chat_id,
            self._decisions.event(pending, outcome),
            on_delta=on_delta,
            turn_id=turn_id,
            fence=fence,
            loaded=session,
            customer=customer,
            extra=self._decisions.told(pending, outcome),
            prior=(replace(outcome, tool=pending.tool),),
        )
        return await self._produced(chat_id, turn_id, result, fence)

    async def finish(self, turn: PendingTurn, *, fence: Fence | None = None) -> TurnResult:
        """After ``turn`` was delivered (or had nothing to deliver): the reply recorded as sent, then
        compaction if due; the turn is reported to the observer."""
        result = turn.result
        if turn.after == "redelivered" and turn.turn_id is not None:
            await self._mark_replied(turn.chat_id, turn.turn_id, fence, last_write=True)
        elif turn.after == "answered":
            # not with a lease that may be gone: the reply's mark is then the only write left (the queue
            # worker keeps it unless another worker took the chat); the next turn compacts
            compaction_due = self.compactor.due(result.history_tokens, result.stored_messages) and (
                fence is None or fence.remaining() > 0
            )
            if turn.turn_id is not None:
                await self._mark_replied(turn.chat_id, turn.turn_id, fence, last_write=not compaction_due)
            if compaction_due:
                try:
                    report = await self.compact_if_needed(turn.chat_id, fence=fence)
                except StoreError as exc:
                    log.warning("chat %s: proactive compaction skipped: %s", turn.chat_id, exc)
                    report = CompactionReport(failed=True)
                result = replace(result, proactive_compaction=report)
        self._observer.turn_finished(result)
        return result

    async def _redeliver(self, chat_id: int, turn_id: str, status: TurnStatus, fence: Fence | None) -> PendingTurn:
        if status.reply is None:
            log.error("chat %s turn %s: committed but its reply is no longer stored; cannot resend", chat_id, turn_id)
            await self._mark_replied(chat_id, turn_id, fence, last_write=True)
            return PendingTurn(chat_id, turn_id, TurnResult(reply="", duplicate=True))
        log.warning("chat %s turn %s: committed earlier, reply possibly unsent: sending it", chat_id, turn_id)
        handoff = status.reply.removeprefix(HANDOFF_MARK) if status.reply.startswith(HANDOFF_MARK) else None
        result = TurnResult(reply=status.reply, duplicate=True, redelivered=True, handoff_reason=handoff)
        if self._decisions is not None:  # the buttons of a decision still open are shown again with it
            waiting = await self._decisions.ledger.open_pending(chat_id)
            result = replace(result, pending=waiting[-1] if waiting else None)
        if fence is not None:
            fence.ensure_valid()
        return PendingTurn(chat_id, turn_id, result, deliver=True, after="redelivered")

    async def _mark_replied(self, chat_id: int, turn_id: str, fence: Fence | None, *, last_write: bool) -> None:
        """Record that the turn's reply went out. When nothing else is written for this turn and the
        queue worker writes reply marks with the update's acknowledgement, the mark is left to it: the
        same crash window (reply sent, not yet recorded) for one script less."""
        if last_write and fence is not None and fence.defer_reply_marks:
            fence.deferred_replies.append(turn_id)
            return
        await self._store.mark_replied(chat_id, turn_id, fence=fence)

    async def _turn_status_or_quarantine(self, chat_id: int, turn_id: str, fence: Fence | None) -> TurnStatus | None:
        try:
            return await self._store.turn_status(chat_id, turn_id)
        except CorruptSessionError as exc:
            await quarantine(self._store, chat_id, exc, fence)
            return None

    async def respond(
        self,
        chat_id: int,
        text: str,
        *,
        on_delta: OnDelta | None = None,
        on_restart: OnRestart | None = None,
        turn_id: str | None = None,
        fence: Fence | None = None,
        loaded: Session | None = None,
        media: TurnMedia | None = None,
        customer: Customer | None = None,
        extra: tuple[PromptPart, ...] = (),
        prior: tuple[ActionOutcome, ...] = (),
    ) -> TurnResult:
        """Produce and store one turn: ``self.steps`` in order (services.engine.turn_steps). Nothing is
        written unless the model replied. ``loaded``: the session as just loaded (the first attempt uses
        it instead of loading again). When another writer changed the chat meanwhile the turn is
        produced again, after ``on_restart``. ``media``: what the customer sent besides ``text`` (the
        caption); images go to the model this turn only (at low detail when the prompt has no room for
        them), the history keeps notes. ``customer``: actions are offered (expired decisions told
        first); ``extra`` and ``prior``: a decision's call and outcome the turn tells the model."""
        self._check_length(text)
        text = clean_text(text)
        tools = self._tools
        if customer is not None and self._decisions is not None:
            customer = await self._decisions.customer(chat_id, customer)
            expired = await self._decisions.expire(chat_id)
            extra, prior = (*extra, *expired.messages), (*prior, *expired.outcomes)
        elif self._decisions is not None:
            tools = self._bare_tools
        request = TurnRequest(
            chat_id, text, media, on_delta, turn_id, fence, tools=tools, customer=customer, extra=extra, prior=prior
        )
        new_part = turn_part(self._counter, text, media)
        draft = TurnDraft(request, 1, self._commit_attempts, new_part, loaded=loaded)
        return await run_turn(self.steps, draft, on_restart)

    def _check_length(self, text: str) -> None:
        if len(text) > self._max_message_chars:  # checked before tokenizing megabytes of text
            raise MessageTooLongError(tokens=len(text), limit=self._max_message_chars, unit="characters")

    def _summary_part(self, session: Session) -> PromptPart | None:
        if session.summary is None:
            return None
        return self.summarizer.block_part(session.summary, tokens=session.summary_tokens or None)

    async def compact_if_needed(self, chat_id: int, *, fence: Fence | None = None) -> CompactionReport | None:
        """Proactive compaction now (see ``Compactor.compact_if_needed``)."""
        return await self.compactor.compact_if_needed(chat_id, fence=fence)

    async def reset(self, chat_id: int, *, fence: Fence | None = None) -> None:
        """/new: the conversation starts over; no turn loaded before can be committed after."""
        await self._store.reset(chat_id, fence=fence)

    async def close(self) -> None:
        """Close the LLM client (the store belongs to its backend, which whoever built it closes)."""
        await self._llm.close()
