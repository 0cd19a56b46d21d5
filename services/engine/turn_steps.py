"""A turn's steps, listed once by ``turn_steps``, each filling a ``TurnDraft``: FitWindow, Ground,
Answer, the ``after_answer`` steps (ChatService's argument: e.g. a tool loop), Reply, Commit,
RecordGap; then ``turn_result``. A step offers the model tools by its ``tools`` attribute and counts
each model call with ``TurnDraft.count``. Retry boundary: a concurrent update at Commit runs every
step again on a new draft, so the steps before Commit must have no outside side effect, or keep its
result on the request (``once``) so a retry reuses it instead of doing it again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

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
from services.core.records import (
    Compaction,
    Completion,
    NewMessage,
    OnDelta,
    OnRestart,
    PromptPart,
    Session,
    Usage,
)
from services.core.tokens import TokenCounter
from services.core.turn_media import TurnMedia
from services.core.turns import CompactionReport, TurnResult
from services.engine.grounding import Grounded, Grounding
from services.engine.handoff_call import handoff_reason
from services.engine.turn_window import TurnWindow
from services.media.notes import ImageNotes, cancel_quietly, notes_within
from services.media.prompt_parts import stored_part
from services.memory.compactor import Compactor
from services.memory.window import Window
from services.ports.chat_model import ChatModel
from services.ports.sessions import CommitResult, SessionStore

log = logging.getLogger(__name__)

T = TypeVar("T")


def need(value: T | None, what: str) -> T:
    """A draft's field an earlier step fills (a step list in the wrong order fails loudly)."""
    if value is None:
        raise AssertionError(f"the turn's {what} is read before the step that makes it")
    return value


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """What the caller asked for: the same on every attempt of the turn."""

    chat_id: int
    text: str
    """The customer's text, cleaned."""
    media: TurnMedia | None
    on_delta: OnDelta | None
    turn_id: str | None
    fence: Fence | None
    tools: tuple[dict[str, Any], ...] = ()
    """The tools the model is offered (the handoff, those the steps name): ``TurnDraft.tools`` starts so."""
    kept: dict[str, Any] = field(default_factory=dict, compare=False)
    """What a step with an outside side effect did, by its key (``once``): kept across attempts."""


@dataclass(slots=True)
class TurnDraft:
    """One attempt of a turn: each step reads what the steps before it wrote and adds its part."""

    request: TurnRequest
    attempt: int
    attempts: int
    """How many attempts the turn may take (a concurrent update on the last one is raised)."""
    new_part: PromptPart
    """The new message as sent (its images at low detail once they did not fit: kept for a retry)."""
    loaded: Session | None = None
    """The session as the caller just loaded it (the first attempt only)."""
    quarantined: bool = False
    session: Session | None = None
    window: Window | None = None
    compaction: Compaction | None = None
    forced: CompactionReport | None = None
    grounded: Grounded | None = None
    completion: Completion | None = None
    stored: PromptPart | None = None
    """The customer's message as the history keeps it (image notes instead of pixels)."""
    reply: NewMessage | None = None
    handoff: str | None = None
    cited: tuple[str, ...] = ()
    commit: CommitResult | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    """The tools offered to the model this attempt (None: the request's); a step may add to them."""
    usage: Usage | None = None
    """The usage of every model call of this attempt, summed (``count``)."""
    llm_seconds: float = 0.0

    def offered(self) -> tuple[dict[str, Any], ...]:
        """The tools the model is offered: the request's, and any a step added (``tools``)."""
        return self.request.tools if self.tools is None else self.tools

    def count(self, completion: Completion) -> None:
        """A model call of the turn: its usage and seconds added to the turn's (a tool loop's every call)."""
        self.llm_seconds += completion.seconds
        if completion.usage is None:
            return
        before = self.usage or Usage()
        more = completion.usage
        self.usage = Usage(
            before.prompt_tokens + more.prompt_tokens,
            before.completion_tokens + more.completion_tokens,
            before.cached_tokens + more.cached_tokens,
        )

    def retry(self) -> TurnDraft:
        """The next attempt, after a concurrent update: the session is loaded again and every step runs
        again; only the request (and what steps kept on it: ``once``) carries over."""
        return TurnDraft(self.request, self.attempt + 1, self.attempts, self.new_part, quarantined=self.quarantined)


class TurnStep(Protocol):
    """One step of a turn. A step that offers the model tools also has ``tools`` (a tuple of specs)."""

    async def run(self, draft: TurnDraft) -> None: ...


async def once(draft: TurnDraft, key: str, action: Callable[[], Awaitable[T]]) -> T:
    """``action``'s result, made on the turn's first attempt that reaches it and kept on the request:
    a retry after a concurrent update reuses it (for a step with an outside side effect)."""
    kept = draft.request.kept
    if key not in kept:
        kept[key] = await action()
    result: T = kept[key]
    return result


def offered_tools(steps: Sequence[object]) -> tuple[dict[str, Any], ...]:
    """The tools the ``steps`` name (a step's ``tools`` attribute), in order."""
    return tuple(tool for step in steps for tool in getattr(step, "tools", ()))


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
        messages, chat_id = need(draft.window, "window").messages, draft.request.chat_id
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
        draft.reply = NewMessage("assistant", text, self._counter.count_message("assistant", text), knowledge=knowledge)


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
        estimated_tokens=window.estimated_tokens,
        context_history_messages=window.context_history_messages,
        removed_history_messages=window.removed_history_messages,
        stored_messages=0 if commit.duplicate else len(session.messages) - folded + 2,
        history_tokens=sum(m.tokens for m in session.messages[folded:]) + stored.tokens + reply.tokens,
        summary_present=compaction is not None or session.summary is not None,
        usage=draft.usage,
        llm_seconds=draft.llm_seconds,
        forced_compaction=draft.forced,
        attempts=draft.attempt,
        quarantined=draft.quarantined,
        cited=draft.cited,
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
