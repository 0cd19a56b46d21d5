"""The Redis backend object: one client shared by the store, the rate limiter, the queue, the poller
lease and the dead letters (``services.ports.backend.Backend``, plus what queued mode needs)."""

from __future__ import annotations

from services.backends.redis.actions import RedisActionLedger
from services.backends.redis.deadletters import RedisDeadLetters
from services.backends.redis.faq import RedisLearnedFaq
from services.backends.redis.gaps import RedisKnowledgeGaps
from services.backends.redis.handoffs import RedisHandoffStore
from services.backends.redis.keys import KeySpace
from services.backends.redis.media import RedisAlbums, RedisMediaMemos
from services.backends.redis.poller import RedisPollingLease
from services.backends.redis.quality import RedisConversationLog
from services.backends.redis.quarantine import RedisQuarantine
from services.backends.redis.queue import RedisWorkQueue
from services.backends.redis.ratelimit import RedisRateLimiter
from services.backends.redis.scripts import AnyRedis, redis_errors
from services.backends.redis.store import RedisSessionStore
from services.core.fence import Fence


class RedisBackend:
    """Every key lives under ``keys.namespace``; ``cluster`` says whether ``redis`` is a cluster client."""

    def __init__(
        self,
        *,
        redis: AnyRedis,
        keys: KeySpace,
        ttl_seconds: int,
        per_minute: int,
        cluster: bool = False,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_seconds = ttl_seconds
        self.cluster = cluster
        self.store = RedisSessionStore(redis=redis, ttl_seconds=ttl_seconds, keys=keys)
        self.limiter = RedisRateLimiter(redis=redis, per_minute=per_minute, keys=keys, ttl_seconds=ttl_seconds)
        self.dead_letters = RedisDeadLetters(redis=redis, keys=keys)
        self.quarantined = RedisQuarantine(redis=redis, keys=keys)
        self.handoffs = RedisHandoffStore(redis=redis, keys=keys, ttl_seconds=ttl_seconds)
        self.gaps = RedisKnowledgeGaps(redis=redis, keys=keys, ttl_seconds=ttl_seconds)
        self.faq = RedisLearnedFaq(redis=redis, keys=keys)
        self.memos = RedisMediaMemos(redis=redis, keys=keys, ttl_seconds=ttl_seconds)
        self.albums = RedisAlbums(redis=redis, keys=keys, ttl_seconds=ttl_seconds)
        self.conversations = RedisConversationLog(redis=redis, keys=keys, ttl_seconds=ttl_seconds)
        self.actions = RedisActionLedger(redis=redis, keys=keys, ttl_seconds=ttl_seconds)

    def queue(self, *, lease_ms: int = 30_000) -> RedisWorkQueue:
        return RedisWorkQueue(redis=self.redis, keys=self.keys, lease_ms=lease_ms, ttl_seconds=self.ttl_seconds)

    def polling_lease(self, *, token: str, lease_ms: int) -> RedisPollingLease:
        return RedisPollingLease(redis=self.redis, keys=self.keys, token=token, lease_ms=lease_ms)

    async def ping(self) -> None:
        await self.store.ping()

    async def forget_chat(self, chat_id: int, *, fence: Fence | None = None) -> None:
        """The handoff's topic binding, then the session and the handoff record (one fenced script; the
        quarantined copy and media memos included), then the chat's dead letters, its unanswered
        questions, the album photos a turn took (those still queued stay) and its conversation records and
        feedback state; the actions' ledger goes with the session (a content key). The rate-limit window
        stays (ids and times only: /forget is no way around the limit). Messages already copied into
        the operator group stay there: they are the operators' records, not the bot's."""
        record = await self.handoffs.get(chat_id, transcript=False)  # the transcript is not decoded
        # first (idempotent): the record keeps the topic until then
        await self.handoffs.unbind(chat_id, record.topic_group, record.topic_id)
        await self.store.forget(chat_id, fence=fence)
        await self.dead_letters.drop_chat(chat_id)
        await self.gaps.forget(chat_id)
        await self.albums.forget(chat_id)
        await self.conversations.forget(chat_id)

    async def close(self) -> None:
        """Closes the one client everything here shares."""
        with redis_errors("closing"):
            await self.redis.aclose()
