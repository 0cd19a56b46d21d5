"""What a turn produced (the engine reports every turn to a ``services.ports.observer.TurnObserver``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from services.core.actions import ActionOutcome, PendingAction
from services.core.knowledge import ScoredPassage
from services.core.records import Usage


@dataclass(frozen=True, slots=True)
class CompactionReport:
    folded_messages: int = 0
    failed: bool = False
    restored_identifiers: int = 0
    summary_tokens: int = 0
    usage: list[Usage] = field(default_factory=list)
    seconds: float = 0.0
    extractive: bool = False
    """Folded without a summary call (none could be made): the identifiers of the turns were kept."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What one turn produced, with the figures operators look at."""

    reply: str
    duplicate: bool = False
    version: int = 0
    estimated_tokens: int = 0
    context_history_messages: int = 0
    removed_history_messages: int = 0
    stored_messages: int = 0
    summary_present: bool = False
    usage: Usage | None = None
    """Summed over the turn's model calls (a tool loop makes several)."""
    first_prompt_tokens: int | None = None
    """The provider's count of the first call's prompt, the one ``estimated_tokens`` estimates."""
    llm_seconds: float = 0.0
    forced_compaction: CompactionReport | None = None
    proactive_compaction: CompactionReport | None = None
    attempts: int = 1
    history_tokens: int = 0
    """Tokens of the verbatim history stored after this turn (decides proactive compaction)."""
    redelivered: bool = False
    """The turn was committed earlier but its reply may not have been sent: it was sent (again)."""
    quarantined: bool = False
    """The stored session could not be read: it was moved aside and this turn started a fresh one."""
    handoff_reason: str | None = None
    """The model handed the conversation over to a human operator (its tool call) instead of replying;
    ``reply`` is then the stored marker, not a text for the customer."""
    knowledge: tuple[ScoredPassage, ...] = ()
    """Passages the prompt carried (KNOWLEDGE_DIR on)."""
    knowledge_matched: bool | None = None
    """With knowledge on: whether any passage cleared the relevance floor (None: knowledge off)."""
    knowledge_degraded: bool = False
    """The query embedding failed: retrieval was full-text only."""
    knowledge_seconds: float = 0.0
    """How long retrieval took."""
    cited: tuple[str, ...] = ()
    """Ids of the passages the reply cites."""
    actions: tuple[ActionOutcome, ...] = ()
    """What this turn's tool calls gave (and a decision carried out or expired, told in it), in order."""
    pending: PendingAction | None = None
    """A write awaiting the customer's button, or an approval awaiting an operator: the edge renders
    the buttons or the card."""
    ask_contact: bool = False
    """A tool needs the customer's phone number: the edge shows the share-contact keyboard."""

    @property
    def summary_updated(self) -> bool:
        return any(r is not None and r.folded_messages > 0 for r in (self.forced_compaction, self.proactive_compaction))


class NoObserver:
    """Records nothing."""

    def turn_finished(self, result: TurnResult) -> None:
        return None


@dataclass(frozen=True)
class PendingTurn:
    """A committed turn between ``ChatService.begin`` and ``finish``: ``result`` is to be sent to the
    customer if ``deliver`` (a reply, the stored reply of a redelivered turn, or a handoff), then
    ``after`` says what ``finish`` records: nothing, the redelivered reply, or the answer (and a
    compaction if due)."""

    chat_id: int
    turn_id: str | None
    result: TurnResult
    deliver: bool = False
    after: Literal["nothing", "redelivered", "answered"] = "nothing"
