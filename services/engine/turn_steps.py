"""A turn's steps, listed once by ``turn_steps``, each filling a ``TurnDraft``: FitWindow, Ground,
Answer, the ``after_answer`` steps (ChatService's argument: e.g. a tool loop), Reply, Commit,
RecordGap; then ``turn_result``. A step offers the model tools by its ``tools`` attribute and counts
each model call with ``TurnDraft.count``. Retry boundary: a concurrent update at Commit runs every
step again on a new draft, so the steps before Commit must have no outside side effect, or keep its
result on the request (``once``) so a retry reuses it instead of doing it again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from prompts.support_chat import HANDOFF_MARK
from services.core import media_reasons as reasons
from services.core.errors import (
    ConcurrentUpdateError,
    CorruptHistoryError,
    CorruptSessionError,
    LLMBadReplyError,
    LLMRequestRejectedError,
    MediaError,
)
from services.core.fence import Fence
from services.core.prompt_format import with_actions
from services.core.records import Completion, NewMessage, OnRestart, PromptPart, Session
from services.core.tokens import TokenCounter
from services.core.turns import TurnResult
from services.engine.grounding import Grounding
from services.engine.handoff_call import handoff_reason
from services.engine.turn_draft import TurnDraft, TurnRequest, TurnStep, need, offered_tools, once
from services.engine.turn_window import TurnWindow
from services.media.notes import ImageNotes, cancel_quietly, notes_within
from services.media.prompt_parts import stored_part
from services.memory.compactor import Compactor
from services.ports.chat_model import ChatModel
from services.ports.sessions import SessionStore

__all__ = ["TurnDraft", "TurnRequest", "TurnStep", "need", "offered_tools", "once", "run_turn", "turn_steps"]

log = logging.getLogger(__name__)


class RetryTurn(Exception):
    """Another writer changed the chat between the load and the commit: the turn is produced again."""


async def quarantine(store: SessionStore, chat_id: int, exc: Exception, fence: Fence | None) -> None:
    """Move an unreadable session aside for an operator; the chat starts over."""
    log.error(
        "chat %s: stored session unreadable (%s); moved aside for an operator (python -m bot quarantine "
        "show %s), the chat starts over",
        chat_id,
        exc,
        chat_id,
    )
    await store.quarantine(chat_id, reason=f"{type(exc).__name__}: {exc}", fence=fence)


class FitWindow:
    """The session (loaded, or a fresh one after quarantining it) and the prompt window within the
    budget; a history that does not fit is compacted before the reply."""

    def __init__(
        self,
        *,
        store: SessionStore,
        windows: TurnWindow,
        compactor: Compactor,
        summary_part: Callable[[Session], PromptPart | None],
    ) -> None:
        self._store = store
        self._windows = windows
        self._compactor = compactor
        self._summary_part = summary_part

    async def run(self, draft: TurnDraft) -> None:
        session = await self._load(draft)
        request = draft.request
        try:
            window, draft.new_part = self._windows.fitting(
                self._summary_part(session), session.messages, draft.new_part, request.text, request.media
            )
        except CorruptHistoryError as exc:
            await quarantine(self._store, request.chat_id, exc, request.fence)
            session, draft.quarantined = await self._store.load(request.chat_id), True
            window = self._windows.build(None, session.messages, draft.new_part)
        if window.removed_history_messages:
            draft.compaction, window, draft.forced = await self._compactor.before_reply(
                session, draft.new_part, window, self._windows.with_new(draft.new_part)
            )
        draft.session, draft.window = session, window

    async def _load(self, draft: TurnDraft) -> Session:
        if draft.loaded is not None:
            return draft.loaded
        chat_id, fence = draft.request.chat_id, draft.request.fence
        try:
            return await self._store.load(chat_id)
        except CorruptSessionError as exc:
            await quarantine(self._store, chat_id, exc, fence)
        draft.quarantined = True
        return await self._store.load(chat_id)


class Ground:
    """The knowledge for the turn, placed in the window (the room for it was held back)."""

    def __init__(self, grounding: Grounding) -> None:
        self._grounding = grounding

    async def run(self, draft: TurnDraft) -> None:
        grounded = await self._grounding.ground(need(draft.session, "session"), draft.request.text)
        draft.grounded, draft.window = grounded, grounded.place(need(draft.window, "window"))


class Answer:
    """The model's completion (streamed), with the image note written beside it: the customer's
    message as the history keeps it."""

    def __init__(
        self,
        *,
        llm: ChatModel,
        counter: TokenCounter,
        notes: ImageNotes | None,
        note_wait: float,
    ) -> None:
        self._llm = llm
        self._counter = counter
        self._notes = notes
        self._note_wait = note_wait

    async def run(self, draft: TurnDraft) -> None:
        request, new_part = draft.request, draft.new_part
        media = request.media
        noting = (
            asyncio.ensure_future(self._notes.describe(request.chat_id, media.images, new_part.images, request.text))
            if self._notes is not None and media is not None and media.images
            else None
        )
        try:
            completion = await self._complete(draft)
        except BaseException:
            if noting is not None:
                await cancel_quietly(noting)
            raise
        notes = await notes_within(noting, request.chat_id, self._note_wait) if noting is not None else ()
        draft.count(completion)
        draft.completion = completion
        draft.stored = stored_part(self._counter, request.text, media, notes)

    async def _complete(self, draft: TurnDraft) -> Completion:
        messages, chat_id = (*need(draft.window, "window").messages, *draft.request.extra), draft.request.chat_id
        on_delta, tools = draft.request.on_delta, draft.offered()
        try:
            if tools:
                return await self._llm.chat(messages, on_delta=on_delta, tools=tools, chat_id=chat_id)
            return await self._llm.chat(messages, on_delta=on_delta, chat_id=chat_id)
        except LLMRequestRejectedError as exc:
            if not draft.new_part.images:
                raise
            # the endpoint refused the request that carried images: a model without vision
            what = f"the model refused image input: {exc}"
            raise MediaError(what, kind="image", reason=reasons.NOT_UNDERSTOOD) from exc


class Reply:
    """The completion as the assistant message to store: a handoff tool call as the handoff mark, or
    the text with its citations checked against the passages sent; any other tool call fails the turn."""

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter

    async def run(self, draft: TurnDraft) -> None:
        completion = need(draft.completion, "completion")
        call = completion.tool_call
        handoff = handoff_reason(call.name, call.arguments) if call is not None else None
        text = HANDOFF_MARK + handoff if handoff is not None else completion.text
        if handoff is None and not completion.text.strip():
            raise LLMBadReplyError(f"the model called an unknown tool {completion.tool_call!r}")
        grounded = draft.grounded
        if grounded is not None and handoff is None:
            rendered = grounded.cite(text)
            text, draft.cited = rendered.text, rendered.cited
        knowledge = grounded.ids if grounded is not None else ()
        draft.handoff = handoff
        lines = tuple(o.line for o in (*draft.request.prior, *draft.actions) if o.line)
        tokens = self._counter.count_message("assistant", with_actions(text, lines))
        draft.reply = NewMessage("assistant", text, tokens, knowledge=knowledge, actions=lines)


class Commit:
    """The customer's message and the reply (with the compaction, if any) stored atomically."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    async def run(self, draft: TurnDraft) -> None:
        request, stored = draft.request, need(draft.stored, "stored message")
        refs = request.media.refs if request.media is not None else ()
        try:
            draft.commit = await self._store.commit_turn(
                request.chat_id,
                expected_version=need(draft.session, "session").version,
                messages=[NewMessage("user", stored.content, stored.tokens, media=refs), need(draft.reply, "reply")],
                compaction=draft.compaction,
                turn_id=request.turn_id,
                fence=request.fence,
            )
        except ConcurrentUpdateError as exc:
            if draft.attempt >= draft.attempts:
                raise
            raise RetryTurn from exc


class RecordGap:
    """A question the documents do not answer, recorded once its turn is stored."""

    def __init__(self, grounding: Grounding) -> None:
        self._grounding = grounding

    async def run(self, draft: TurnDraft) -> None:
        grounded, commit = need(draft.grounded, "knowledge"), need(draft.commit, "commit")
        if grounded.gap and not commit.duplicate:
            await self._grounding.record_gap(draft.request.chat_id, draft.request.text)


@dataclass(frozen=True)
class TurnParts:
    """What the steps are made of (ChatService's): ``turn_steps`` builds every step from them."""

    store: SessionStore
    windows: TurnWindow
    compactor: Compactor
    summary_part: Callable[[Session], PromptPart | None]
    llm: ChatModel
    counter: TokenCounter
    grounding: Grounding | None
    notes: ImageNotes | None
    note_wait: float


def turn_steps(parts: TurnParts, *, after_answer: Sequence[TurnStep] = ()) -> tuple[TurnStep, ...]:
    """The steps of a turn, in order, in one list: the knowledge steps only with a knowledge base,
    ``after_answer`` (e.g. a tool loop) between the model's answer and the reply made of it."""
    grounding = parts.grounding
    store, counter = parts.store, parts.counter
    fit = FitWindow(store=store, windows=parts.windows, compactor=parts.compactor, summary_part=parts.summary_part)
    answer = Answer(llm=parts.llm, counter=counter, notes=parts.notes, note_wait=parts.note_wait)
    return (
        fit,
        *([Ground(grounding)] if grounding is not None else []),
        answer,
        *after_answer,
        Reply(counter),
        Commit(store),
        *([RecordGap(grounding)] if grounding is not None else []),
    )


async def run_turn(steps: Sequence[TurnStep], draft: TurnDraft, on_restart: OnRestart | None) -> TurnResult:
    """The steps in order on ``draft``, again on a new draft for as long as a step asks for a retry."""
    while True:
        try:
            for step in steps:
                await step.run(draft)
        except RetryTurn:
            log.info("chat %s changed during the turn; retrying (%d)", draft.request.chat_id, draft.attempt)
            if on_restart is not None:
                on_restart()
            draft = draft.retry()
            continue
        return turn_result(draft)


def turn_result(draft: TurnDraft) -> TurnResult:
    """The committed turn's result, from what its steps wrote."""
    session, window, commit = need(draft.session, "session"), need(draft.window, "window"), need(draft.commit, "commit")
    stored, reply = need(draft.stored, "stored message"), need(draft.reply, "reply")
    need(draft.completion, "completion")
    compaction = draft.compaction
    folded = compaction.fold_count if compaction else 0
    result = TurnResult(
        reply=reply.content,
        handoff_reason=draft.handoff,
        duplicate=commit.duplicate,
        version=commit.version,
        estimated_tokens=window.estimated_tokens + sum(part.tokens for part in draft.request.extra),
        context_history_messages=window.context_history_messages,
        removed_history_messages=window.removed_history_messages,
        stored_messages=0 if commit.duplicate else len(session.messages) - folded + 2,
        history_tokens=sum(m.tokens for m in session.messages[folded:]) + stored.tokens + reply.tokens,
        summary_present=compaction is not None or session.summary is not None,
        usage=draft.usage,
        first_prompt_tokens=draft.first_prompt_tokens,
        llm_seconds=draft.llm_seconds,
        forced_compaction=draft.forced,
        attempts=draft.attempt,
        quarantined=draft.quarantined,
        cited=draft.cited,
        actions=(*draft.request.prior, *draft.actions),
        pending=draft.pending,
        ask_contact=draft.ask_contact,
    )
    grounded = draft.grounded
    if grounded is None:
        return result
    return replace(
        result,
        knowledge=grounded.sent,
        knowledge_matched=grounded.matched,
        knowledge_seconds=grounded.seconds,
        knowledge_degraded=grounded.degraded,
    )
