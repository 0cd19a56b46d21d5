"""The backend contract: everything that keeps state, built once by the factory (and what queued
mode and the operator commands need of a backend several processes share)."""

from __future__ import annotations

from typing import Protocol

from services.core.fence import Fence
from services.ports.actions import ActionLedger
from services.ports.deadletters import DeadLetters, Quarantine
from services.ports.handoffs import HandoffStore
from services.ports.knowledge import KnowledgeGaps, LearnedFaq
from services.ports.media import Albums, MediaMemos
from services.ports.quality import ConversationLog
from services.ports.queue import PollingLease, WorkQueue
from services.ports.ratelimit import RateLimiter
from services.ports.sessions import SessionStore


class Backend(Protocol):
    """Everything that keeps state, built once by the factory: the session store, the rate limiter,
    a readiness ping and the one place that knows every record of a chat (``forget_chat``)."""

    @property
    def store(self) -> SessionStore: ...

    @property
    def limiter(self) -> RateLimiter: ...

    @property
    def handoffs(self) -> HandoffStore: ...

    @property
    def gaps(self) -> KnowledgeGaps:
        """Questions no document answered (recorded only with KNOWLEDGE_DIR; /forget removes a chat's)."""
        ...

    @property
    def faq(self) -> LearnedFaq:
        """FAQ entries operators wrote and the daily gaps digest's marks (not a chat's records: /forget
        leaves them)."""
        ...

    @property
    def memos(self) -> MediaMemos:
        """Transcripts and image notes by file (a redelivered update pays the provider once)."""
        ...

    @property
    def albums(self) -> Albums:
        """The photos of Telegram albums, collected so an album is answered as one turn."""
        ...

    @property
    def conversations(self) -> ConversationLog:
        """Conversations and the feedback question (docs/quality.md); /forget removes a chat's."""
        ...

    @property
    def actions(self) -> ActionLedger:
        """What actions did (recorded outcomes, pending decisions, lines, the shared phone); /forget
        deletes it."""
        ...

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
    def quarantined(self) -> Quarantine: ...

    def queue(self, *, lease_ms: int = 30_000) -> WorkQueue:
        """The per-chat work queue, with this lease."""
        ...

    def polling_lease(self, *, token: str, lease_ms: int) -> PollingLease:
        """The polling leadership, held as ``token``."""
        ...
