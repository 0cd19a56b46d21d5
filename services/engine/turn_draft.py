"""One turn's data: the request (the same on every attempt) and the draft its steps fill (one
attempt), the step contract, and ``once`` for a step's outside side effect (kept across attempts)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from services.core.actions import ActionOutcome, Customer, PendingAction
from services.core.fence import Fence
from services.core.records import Compaction, Completion, NewMessage, OnDelta, PromptPart, Session, Usage
from services.core.turn_media import TurnMedia
from services.core.turns import CompactionReport
from services.engine.grounding import Grounded
from services.memory.window import Window
from services.ports.sessions import CommitResult

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
    customer: Customer | None = None
    """Who actions act for (from the update, by code); None: no actions this turn (groups)."""
    extra: tuple[PromptPart, ...] = ()
    """Messages after the new one in every model call of the turn (a decision's call and its result)."""
    prior: tuple[ActionOutcome, ...] = ()
    """Outcomes the turn tells the model before any call of its own (a decision carried out, expiries)."""
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
    first_prompt_tokens: int | None = None
    """The provider's prompt tokens of the attempt's first model call: the prompt the estimate is of."""
    llm_seconds: float = 0.0
    actions: tuple[ActionOutcome, ...] = ()
    """What this attempt's tool calls gave (a tool loop's), in order."""
    pending: PendingAction | None = None
    """A write or approval the turn left awaiting a person's decision."""
    ask_contact: bool = False
    """A tool needs the customer's phone number: the share-contact button is shown."""

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
        if self.first_prompt_tokens is None:
            self.first_prompt_tokens = more.prompt_tokens
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
