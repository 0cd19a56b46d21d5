"""InMemoryBackend: the in-process backend, the single-process default when REDIS_URL is unset
(nothing survives a restart; one process only). One module per contract beside it."""

from __future__ import annotations

from services.backends.memory.actions import InMemoryActionLedger
from services.backends.memory.faq import InMemoryLearnedFaq
from services.backends.memory.gaps import InMemoryKnowledgeGaps
from services.backends.memory.handoffs import InMemoryHandoffStore
from services.backends.memory.media import InMemoryAlbums, InMemoryMediaMemos
from services.backends.memory.quality import InMemoryConversationLog
from services.backends.memory.ratelimit import InMemoryRateLimiter
from services.backends.memory.store import InMemorySessionStore
from services.core.fence import Fence


class InMemoryBackend:
    """The in-process store and rate limiter (``services.ports.backend.Backend``)."""

    def __init__(self, *, ttl_seconds: int = 0, per_minute: int = 0) -> None:
        self.store = InMemorySessionStore(ttl_seconds=ttl_seconds)
        self.limiter = InMemoryRateLimiter(per_minute=per_minute)
        self.handoffs = InMemoryHandoffStore()
        self.gaps = InMemoryKnowledgeGaps(ttl_seconds=ttl_seconds)
        self.faq = InMemoryLearnedFaq()
        self.memos = InMemoryMediaMemos(ttl_seconds=ttl_seconds)
        self.albums = InMemoryAlbums(ttl_seconds=ttl_seconds)
        self.conversations = InMemoryConversationLog(ttl_seconds=ttl_seconds)
        self.actions = InMemoryActionLedger()

    async def ping(self) -> None:
        await self.store.ping()

    async def forget_chat(self, chat_id: int, *, fence: Fence | None = None) -> None:
        """The topic binding first (idempotent), then the records: a failure in between leaves the
        record, and the topic id with it, for the next attempt."""
        record = await self.handoffs.get(chat_id, transcript=False)
        await self.handoffs.unbind(chat_id, record.topic_group, record.topic_id)
        await self.store.forget(chat_id, fence=fence)
        self.handoffs._drop(chat_id)
        await self.gaps.forget(chat_id)
        self.memos.forget(chat_id)
        await self.albums.forget(chat_id)
        await self.conversations.forget(chat_id)
        await self.actions.forget(chat_id)

    async def close(self) -> None:
        await self.store.close()
