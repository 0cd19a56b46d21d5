"""The ports of the engine and the runtime: what a backend (services/backends) and the model client
provide, as Protocols. Adding a backend means implementing these; nothing outside the factory
looks at concrete types."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from services.engine.models import Compaction, Completion, NewMessage, OnDelta, PromptPart, Session
from services.engine.turns import TurnResult
from services.fence import Fence

if TYPE_CHECKING:  # services.handoff builds on the engine, which depends on these ports
    from services.handoff import Handoff, Recorded, TranscriptEntry


@dataclass(frozen=True, slots=True)
class TurnStatus:
    """What is known of a turn id: committed (with its stored reply, if still verbatim) and replied."""

    committed: bool = False
    replied: bool = False
    reply: str | None = None


@dataclass(frozen=True, slots=True)
class CommitResult:
    version: int
    duplicate: bool = False
    """True when ``turn_id`` was already committed: nothing was written."""


class SessionStore(Protocol):
    """Per-chat memory: running summary + verbatim recent messages + a version used as a write fence.

    Every write is atomic and fenced by ``expected_version``: if the session changed since it was
    loaded, the write raises ConcurrentUpdateError and changes nothing. The version only grows (``reset``
    and ``forget`` move it on too), so a turn loaded before them can never be committed after them.

    Writes made on behalf of a queue worker carry its ``fence``; a store shared by several processes
    refuses them with LeaseLostError once the worker no longer holds the chat's lease. ``load`` raises
    CorruptSessionError for a session it cannot decode (``quarantine`` moves it aside).
    """

    async def load(self, chat_id: int) -> Session:
        """The whole session in one round trip (an empty Session if the chat is new)."""
        ...

    async def commit_turn(
        self,
        chat_id: int,
        *,
        expected_version: int,
        messages: Sequence[NewMessage],
        compaction: Compaction | None = None,
        turn_id: str | None = None,
        fence: Fence | None = None,
    ) -> CommitResult:
        """Append ``messages`` (and apply ``compaction``) atomically. A ``turn_id`` that was already
        committed is recognised and nothing is written (``duplicate=True``)."""
        ...

    async def apply_compaction(
        self, chat_id: int, *, expected_version: int, compaction: Compaction, fence: Fence | None = None
    ) -> int:
        """Replace the summary and drop the folded oldest messages; returns the new version."""
        ...

    async def load_turn(self, chat_id: int, turn_id: str) -> tuple[TurnStatus, Session]:
        """``turn_status`` and ``load`` together, in one round trip (the start of every queued turn)."""
        ...

    async def turn_status(self, chat_id: int, turn_id: str) -> TurnStatus:
        """Whether a turn with this id was committed and its reply sent (recent ids only)."""
        ...

    async def mark_replied(self, chat_id: int, turn_id: str, *, fence: Fence | None = None) -> None:
        """Record that the reply of this turn reached the customer."""
        ...

    async def reset(self, chat_id: int, *, fence: Fence | None = None) -> None:
        """Delete summary and messages together (the chat starts over; the version keeps counting)."""
        ...

    async def forget(self, chat_id: int, *, fence: Fence | None = None) -> None:
        """Delete every record of the conversation; only the version counter stays."""
        ...

    async def quarantine(self, chat_id: int, *, reason: str, fence: Fence | None = None) -> None:
        """Move an unreadable session aside for an operator; the chat starts over at a higher version."""
        ...

    async def ping(self) -> None:
        """Raise StoreUnavailableError if the store cannot be reached."""
        ...

    async def close(self) -> None: ...


TURN_IDS_KEPT = 1000
"""How many recent turn ids a chat remembers for deduplication."""


class TurnObserver(Protocol):
    """Told about every turn the engine handled (Prometheus in the bot; a collector elsewhere)."""

    def turn_finished(self, result: TurnResult) -> None: ...


class ChatModel(Protocol):
    """The language model as the engine uses it (services.engine.llm.LLMClient over AsyncOpenAI)."""

    async def chat(
        self,
        messages: Sequence[PromptPart],
        *,
        on_delta: OnDelta | None = None,
        tools: Sequence[dict[str, Any]] = (),
    ) -> Completion:
        """The reply to ``messages`` (or a call of one of ``tools``); raises LLMError subclasses."""
        ...

    async def summarize(self, messages: Sequence[PromptPart], *, schema: dict[str, Any]) -> Completion:
        """A structured (JSON) completion for the summarizer."""
        ...

    async def close(self) -> None: ...


RATE_WINDOW_SECONDS = 60


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    notify: bool = False
    """Refused, and the first refusal of this window: tell the customer once."""
    retry_after: float = 0.0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One update an operator has to look at."""

    id: str
    chat_id: int
    item_id: str
    order: int
    payload: str
    """The update as it was queued (JSON), replayable as is."""
    error: str
    attempts: int
    worker: str
    at: float

    @staticmethod
    def make_id(chat_id: int, item_id: str) -> str:
        return f"{chat_id}:{item_id}"


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A session moved aside: which chat, when (epoch seconds) and why."""

    chat_id: int
    at: float
    reason: str


class RateLimiter(Protocol):
    """Per-chat message rate limit (a sliding window of one minute)."""

    async def hit(self, chat_id: int, *, key: str | None = None) -> RateDecision:
        """Count one message of the chat. The same ``key`` (an update id) is counted once: a retried
        update is never refused because of its own earlier attempt."""
        ...

    async def forget(self, chat_id: int) -> None: ...


@dataclass(frozen=True, slots=True)
class QueueItem:
    """One queued item at the head of a chat's inbox, with its delivery history."""

    id: str
    payload: str
    enqueued_ms: int
    member: bytes
    """The inbox entry exactly as stored (what ``next`` acknowledges)."""
    order: int = 0
    started: int = 1
    """Attempts started on this item, this one included."""
    transient_failures: int = 0
    failures: int = 0
    """Earlier attempts that failed for a reason that will not pass by itself."""
    failing_for: float = 0.0
    """Seconds since its first transient failure (0: none)."""
    model_requests: int = 0
    """Model requests earlier attempts made and failed (capped per question)."""
    retry_in: float = 0.0
    """Seconds until it may be tried again (the provider's Retry-After or the backoff; 0: now)."""
    given_up: int = 0
    """How far giving it up got: 0 not given up, 1 dead-lettered, 2 and the customer told."""

    @property
    def vanished_attempts(self) -> int:
        """Earlier attempts that left no outcome: the worker died, or lost the chat's lease mid-item."""
        return self.started - 1 - self.transient_failures - self.failures


@dataclass(slots=True)
class Claim:
    """A chat this worker holds (or is about to take) the lease of."""

    chat_id: int
    token: str
    watchdog: int
    others_due: bool = True
    """Whether another chat was due when this one was claimed; if not, the worker waits for a wake-up
    instead of claiming again (one round trip less per update when the worker keeps up)."""


@dataclass(frozen=True, slots=True)
class Taken:
    """What ``enqueue_and_take`` did: whether the item was new and, when the caller now holds the
    chat's lease, the claim and its first step (the inbox head)."""

    new: bool
    claim: Claim | None = None
    step: Step | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """What ``next`` found: an item to process, the chat released (inbox empty), or the lease gone."""

    kind: Literal["item", "released", "lost", "busy"]
    item: QueueItem | None = None


class WorkQueue(Protocol):
    """A durable per-chat work queue: any worker serves any chat, one chat at a time, in order.
    Errors of the backend surface as StoreUnavailableError (transient)."""

    lease_ms: int

    async def enqueue(self, chat_id: int, item_id: str, payload: str, *, order: int) -> bool:
        """Store an item once (False: already taken in) and make its chat due."""
        ...

    async def enqueue_and_take(self, chat_id: int, item_id: str, payload: str, *, order: int, token: str) -> Taken:
        """Store an item once and, when nobody holds its chat, take the chat's lease for the caller, who
        then serves it (its claim and first step in ``Taken``); otherwise make the chat due."""
        ...

    async def claim(self, token: str) -> Claim | None:
        """The first due chat, its lease not yet taken (``next(acquire=True)`` takes it)."""
        ...

    async def next(
        self, claim: Claim, *, done: QueueItem | None = None, acquire: bool = False, replied: Sequence[str] = ()
    ) -> Step:
        """Acknowledge ``done``, then the inbox head, or the chat released when the inbox is empty.
        ``replied``: turn ids whose replies went out, marked in the same step (``Fence.deferred_replies``)."""
        ...

    async def note(
        self,
        claim: Claim,
        item: QueueItem,
        outcome: Literal["transient", "failed", "set_aside"],
        *,
        replied: Sequence[str] = (),
        model_requests: int = 0,
        retry_in: float = 0.0,
    ) -> None:
        """Record how an attempt on ``item`` ended (counted towards giving up on it), the model requests
        it made, the wait before the next attempt, and mark ``replied``."""
        ...

    async def given_up(self, claim: Claim, item: QueueItem, stage: int) -> None:
        """Record how far giving ``item`` up got (1 dead-lettered, 2 the customer told)."""
        ...

    async def defer(self, claim: Claim, seconds: float) -> None:
        """Give the chat up, due again in ``seconds``."""
        ...

    async def wait_for_work(self, seconds: float) -> None: ...

    async def renew(self, claim: Claim) -> bool:
        """Extend the chat's lease; False once it is lost."""
        ...

    async def hand_back(self, claim: Claim) -> None:
        """Give the chat up (due again at once for any worker)."""
        ...

    async def stats(self) -> tuple[int, float]:
        """Chats due now, and the age in seconds of the oldest due one."""
        ...


class PollingLease(Protocol):
    """Who polls getUpdates (one worker at a time) and the offset only the leader may move."""

    lease_ms: int

    async def lead(self) -> bool:
        """Take or renew the leadership; False while another worker holds it."""
        ...

    async def offset(self) -> int | None: ...

    async def set_offset(self, offset: int) -> bool:
        """Move the offset, only while still leading (False otherwise)."""
        ...

    async def resign(self) -> None: ...


RelayState = Literal["new", "started", "done"]


class HandoffStore(Protocol):
    """Handoffs to a human operator. Per chat (fenced by the chat's lease like every session write):
    the record, its transcript and the ids of the messages already relayed (exactly once). Global:
    which forum topic belongs to which chat, and the reply deadlines of open handoffs."""

    async def get(self, chat_id: int, *, transcript: bool = True) -> Handoff:
        """The chat's record (``state="none"`` if it never had a handoff); its transcript only with
        ``transcript`` (the hot path and /forget do without it)."""
        ...

    async def set_topic(self, chat_id: int, group_id: int, topic_id: int, *, fence: Fence | None = None) -> None:
        """Remember the chat's forum topic and its group (reused by its next handoff in that group)."""
        ...

    async def open(
        self, chat_id: int, *, reason: str, trigger: str, language: str, item_id: str = "", fence: Fence | None = None
    ) -> bool:
        """Start a handoff (a fresh transcript; ``item_id``, the update that opened it, is kept as
        ``opened_by``); False if one is already open (nothing written)."""
        ...

    async def record(
        self, chat_id: int, item_id: str, entry: TranscriptEntry | None, *, fence: Fence | None = None
    ) -> Recorded:
        """Append ``entry`` (None: only the mark) and mark ``item_id`` relayed, atomically; nothing if
        it was already, if the record is gone (/forget), or, for a customer's or operator's message or
        a note, if the handoff is not open. The transcript keeps its newest ``TRANSCRIPT_KEPT``
        entries."""
        ...

    async def begin_relay(self, chat_id: int, item_id: str, *, fence: Fence | None = None) -> None:
        """Note that ``item_id`` is about to be copied (``record`` completes it); nothing once the
        record is gone."""
        ...

    async def relay_state(self, chat_id: int, item_id: str) -> RelayState:
        """``done`` (recorded: never copy again), ``started`` (a copy began and was not recorded: it
        may have reached Telegram) or ``new``."""
        ...

    async def flag(self, chat_id: int, *, fence: Fence | None = None) -> bool:
        """Mark an open handoff overdue (no operator reply in time); False if it was not open or
        already flagged."""
        ...

    async def close(self, chat_id: int, *, item_id: str = "", fence: Fence | None = None) -> bool:
        """End the open handoff (the topic id stays; ``item_id`` is kept as ``closed_by``; the
        transcript is deleted: fold it first); False if none was open."""
        ...

    async def bind_topic(self, group_id: int, topic_id: int, chat_id: int) -> None:
        """Global: the group's topic belongs to this chat (idempotent)."""
        ...

    async def chat_of_topic(self, group_id: int, topic_id: int) -> int | None: ...

    async def track(self, chat_id: int, *, open: bool | None, reply_within: float | None = None) -> None:
        """Global: whether the chat has an open handoff (None: left as it is), and its reply deadline
        (``reply_within`` seconds from now; None removes it). Idempotent."""
        ...

    async def due(self, limit: int = 100) -> list[int]:
        """Chats whose reply deadline has passed."""
        ...

    async def open_count(self) -> int:
        """Open handoffs (the gauge)."""
        ...

    async def unbind(self, chat_id: int, group_id: int | None, topic_id: int | None) -> None:
        """Global: forget the chat's topic and deadline (/forget)."""


class DeadLetters(Protocol):
    """Updates given up on, kept for an operator (``python -m bot dead-letters``)."""

    async def add(
        self, *, chat_id: int, item_id: str, order: int, payload: str, error: str, attempts: int, worker: str
    ) -> DeadLetter:
        """Record (or overwrite: the id is the chat and the item) one dead letter."""
        ...

    async def list(self, limit: int = 50) -> list[DeadLetter]:
        """The newest ``limit`` records, newest first."""
        ...

    async def get(self, letter_id: str) -> DeadLetter | None: ...

    async def count(self) -> int: ...

    async def drop(self, *letter_ids: str) -> int: ...

    async def drop_chat(self, chat_id: int) -> None:
        """Every dead letter of one chat (/forget)."""
        ...


class QuarantineStore(Protocol):
    """Sessions moved aside because they could not be read (``python -m bot quarantine``)."""

    async def list(self) -> list[Quarantined]: ...

    async def show(self, chat_id: int) -> dict[str, Any] | None:
        """The quarantined copy as stored, or None."""
        ...

    async def drop(self, chat_id: int) -> int:
        """Delete the quarantined copy; how many records went."""
        ...


class Backend(Protocol):
    """Everything that keeps state, built once by the factory: the session store, the rate limiter,
    a readiness ping and the one place that knows every record of a chat (``forget_chat``)."""

    @property
    def store(self) -> SessionStore: ...

    @property
    def limiter(self) -> RateLimiter: ...

    @property
    def handoffs(self) -> HandoffStore: ...

    async def ping(self) -> None:
        """Raise StoreUnavailableError if the backend cannot be reached."""
        ...

    async def forget_chat(self, chat_id: int, *, fence: Fence | None = None) -> None:
        """/forget: every record of the chat's conversation goes, the handoff record and its topic
        binding included. What stays holds no conversation: the version counter (nothing loaded before
        can be written back) and the rate-limit window (update ids and times: /forget is no way around
        the limit)."""
        ...

    async def close(self) -> None: ...


class QueuedBackend(Backend, Protocol):
    """A backend several processes can share: what queued mode and the operator commands need."""

    @property
    def dead_letters(self) -> DeadLetters: ...

    @property
    def quarantined(self) -> QuarantineStore: ...

    def queue(self, *, lease_ms: int = 30_000) -> WorkQueue:
        """The per-chat work queue, with this lease."""
        ...

    def polling_lease(self, *, token: str, lease_ms: int) -> PollingLease:
        """The polling leadership, held as ``token``."""
        ...
