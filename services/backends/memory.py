"""The in-process backend: the single-process default when REDIS_URL is unset (nothing survives a
restart; one process only)."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from services.backends.memory_media import InMemoryAlbums, InMemoryMediaMemos
from services.engine.handoff_records import (
    NEEDS_OPEN,
    RELAYED_IDS_KEPT,
    TRANSCRIPT_KEPT,
    Handoff,
    Recorded,
    TranscriptEntry,
)
from services.engine.models import Compaction, NewMessage, Session, StoredMessage
from services.engine.summary_state import SummaryState
from services.errors import ConcurrentUpdateError
from services.fence import Fence
from services.knowledge.gaps import GAPS_KEPT, normalize_question, worth_recording
from services.ports.handoffs import RelayState
from services.ports.ratelimit import RATE_WINDOW_SECONDS, RateDecision
from services.ports.sessions import TURN_IDS_KEPT, CommitResult, TurnStatus


@dataclass
class _Chat:
    version: int = 0
    next_seq: int = 0
    summary: SummaryState | None = None
    summary_tokens: int = 0
    messages: list[StoredMessage] = field(default_factory=list)
    turn_ids: dict[str, int] = field(default_factory=dict)
    replied: dict[str, None] = field(default_factory=dict)
    expires_at: float | None = None


class InMemorySessionStore:
    """Same contract as the Redis store, for one process. Nothing survives a restart.

    One process has no leases to lose: ``fence`` arguments are accepted and need no check here."""

    def __init__(self, *, ttl_seconds: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self._chats: dict[int, _Chat] = {}
        self._ttl = ttl_seconds
        self._now = clock

    def _get(self, chat_id: int) -> _Chat | None:
        chat = self._chats.get(chat_id)
        if chat is not None and chat.expires_at is not None and chat.expires_at <= self._now():
            del self._chats[chat_id]
            return None
        return chat

    def _touch(self, chat: _Chat) -> None:
        chat.expires_at = self._now() + self._ttl if self._ttl > 0 else None

    async def load(self, chat_id: int) -> Session:
        chat = self._get(chat_id)
        if chat is None:
            return Session(chat_id=chat_id)
        return Session(
            chat_id=chat_id,
            version=chat.version,
            next_seq=chat.next_seq,
            summary=chat.summary,
            summary_tokens=chat.summary_tokens,
            messages=tuple(chat.messages),
        )

    def _fenced(self, chat_id: int, expected_version: int) -> _Chat:
        chat = self._get(chat_id) or self._chats.setdefault(chat_id, _Chat())
        if chat.version != expected_version:
            raise ConcurrentUpdateError(
                f"chat {chat_id} is at version {chat.version}, the write expected {expected_version}"
            )
        return chat

    @staticmethod
    def _compact(chat: _Chat, compaction: Compaction) -> None:
        del chat.messages[: compaction.fold_count]
        chat.summary = compaction.summary
        chat.summary_tokens = compaction.summary_tokens

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
        existing = self._get(chat_id)
        if turn_id is not None and existing is not None and turn_id in existing.turn_ids:
            return CommitResult(version=existing.version, duplicate=True)
        chat = self._fenced(chat_id, expected_version)
        for message in messages:
            chat.messages.append(
                StoredMessage(
                    chat.next_seq, message.role, message.content, message.tokens, message.knowledge, message.media
                )
            )
            chat.next_seq += 1
        if compaction is not None:
            self._compact(chat, compaction)
        if turn_id is not None:
            chat.turn_ids[turn_id] = chat.next_seq - 1  # the seq of the turn's last message (the reply)
            while len(chat.turn_ids) > TURN_IDS_KEPT:
                chat.turn_ids.pop(next(iter(chat.turn_ids)))
        chat.version += 1
        self._touch(chat)
        return CommitResult(version=chat.version)

    async def apply_compaction(
        self, chat_id: int, *, expected_version: int, compaction: Compaction, fence: Fence | None = None
    ) -> int:
        chat = self._fenced(chat_id, expected_version)
        self._compact(chat, compaction)
        chat.version += 1
        self._touch(chat)
        return chat.version

    async def load_turn(self, chat_id: int, turn_id: str) -> tuple[TurnStatus, Session]:
        return await self.turn_status(chat_id, turn_id), await self.load(chat_id)

    async def turn_status(self, chat_id: int, turn_id: str) -> TurnStatus:
        chat = self._get(chat_id)
        if chat is None:
            return TurnStatus()
        replied = turn_id in chat.replied
        reply_seq = chat.turn_ids.get(turn_id)
        if reply_seq is None:
            return TurnStatus(replied=replied)
        reply = next((m.content for m in chat.messages if m.seq == reply_seq and m.role == "assistant"), None)
        return TurnStatus(committed=True, replied=replied, reply=reply)

    async def mark_replied(self, chat_id: int, turn_id: str, *, fence: Fence | None = None) -> None:
        chat = self._get(chat_id) or self._chats.setdefault(chat_id, _Chat())
        chat.replied[turn_id] = None
        while len(chat.replied) > TURN_IDS_KEPT:
            chat.replied.pop(next(iter(chat.replied)))

    async def reset(self, chat_id: int, *, fence: Fence | None = None) -> None:
        chat = self._get(chat_id)
        if chat is None:
            return
        chat.messages.clear()
        chat.summary = None
        chat.summary_tokens = 0
        chat.version += 1
        self._touch(chat)

    async def forget(self, chat_id: int, *, fence: Fence | None = None) -> None:
        chat = self._get(chat_id)
        self._chats[chat_id] = _Chat(version=(chat.version if chat else 0) + 1)  # only the version stays
        self._touch(self._chats[chat_id])

    async def quarantine(self, chat_id: int, *, reason: str, fence: Fence | None = None) -> None:
        """Objects in memory cannot be unreadable; kept for the contract (starts the chat over)."""
        chat = self._get(chat_id)
        self._chats[chat_id] = _Chat(version=(chat.version if chat else 0) + 1)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass
class _Window:
    hits: deque[float] = field(default_factory=deque)
    keys: deque[str | None] = field(default_factory=deque)
    notified_until: float = 0.0


class InMemoryRateLimiter:
    """Same rule for one process."""

    def __init__(self, *, per_minute: int) -> None:
        self._limit = per_minute
        self._chats: dict[int, _Window] = {}

    async def hit(self, chat_id: int, *, key: str | None = None) -> RateDecision:
        if self._limit <= 0:
            return RateDecision(True)
        now = time.monotonic()
        window = self._chats.setdefault(chat_id, _Window())
        while window.hits and window.hits[0] <= now - RATE_WINDOW_SECONDS:
            window.hits.popleft()
            window.keys.popleft()
        if key is not None and key in window.keys:
            return RateDecision(True)
        if len(window.hits) < self._limit:
            window.hits.append(now)
            window.keys.append(key)
            return RateDecision(True)
        wait = window.hits[0] + RATE_WINDOW_SECONDS - now
        notify = now >= window.notified_until
        if notify:
            window.notified_until = now + wait
        return RateDecision(False, notify, wait)

    async def forget(self, chat_id: int) -> None:
        self._chats.pop(chat_id, None)


class InMemoryHandoffStore:
    """Same contract as the Redis handoff store, for one process (no leases: ``fence`` is not checked)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._records: dict[int, Handoff] = {}
        self._relayed: dict[int, dict[str, None]] = {}
        self._topics: dict[tuple[int, int], int] = {}
        self._deadlines: dict[int, float] = {}
        self._open: set[int] = set()
        self._now = clock

    def _ms(self) -> int:
        return int(self._now() * 1000)

    async def get(self, chat_id: int, *, transcript: bool = True) -> Handoff:
        record = self._records.get(chat_id, Handoff())
        return record if transcript else replace(record, transcript=())

    async def set_topic(self, chat_id: int, group_id: int, topic_id: int, *, fence: Fence | None = None) -> None:
        self._records[chat_id] = replace(await self.get(chat_id), topic_id=topic_id, topic_group=group_id)

    async def start(
        self, chat_id: int, *, reason: str, trigger: str, language: str, item_id: str = "", fence: Fence | None = None
    ) -> bool:
        record = await self.get(chat_id)
        if record.open:
            return False
        self._records[chat_id] = Handoff(
            state="open", topic_id=record.topic_id, topic_group=record.topic_group, reason=reason,
            trigger=trigger, language=language, opened_ms=self._ms(), opened_by=item_id,
        )  # fmt: skip
        return True

    async def record(
        self, chat_id: int, item_id: str, entry: TranscriptEntry | None, *, fence: Fence | None = None
    ) -> Recorded:
        record = self._records.get(chat_id)
        if record is None or (entry is not None and entry.who in NEEDS_OPEN and not record.open):
            return Recorded(new=False)
        relayed = self._relayed.setdefault(chat_id, {})
        if item_id in relayed:
            return Recorded(new=False)
        relayed.pop(f"~{item_id}", None)
        relayed[item_id] = None
        while len(relayed) > RELAYED_IDS_KEPT:
            relayed.pop(next(iter(relayed)))
        record = await self.get(chat_id)
        first: float | None = None
        if entry is None:
            return Recorded(new=True)
        changes: dict[str, object] = {"transcript": (*record.transcript, entry)[-TRANSCRIPT_KEPT:]}
        if entry.who == "operator" and not record.first_reply_ms:
            now = self._ms()
            changes["first_reply_ms"] = now
            first = max(0.0, (now - record.opened_ms) / 1000)
        self._records[chat_id] = replace(record, **changes)  # type: ignore[arg-type]
        return Recorded(new=True, first_reply_seconds=first)

    async def begin_relay(self, chat_id: int, item_id: str, *, fence: Fence | None = None) -> None:
        if chat_id not in self._records:
            return
        self._relayed.setdefault(chat_id, {})[f"~{item_id}"] = None

    async def relay_state(self, chat_id: int, item_id: str) -> RelayState:
        relayed = self._relayed.get(chat_id, {})
        return "done" if item_id in relayed else "started" if f"~{item_id}" in relayed else "new"

    async def flag(self, chat_id: int, *, fence: Fence | None = None) -> bool:
        record = await self.get(chat_id)
        if not record.open or record.flagged:
            return False
        self._records[chat_id] = replace(record, flagged=True)
        return True

    async def end(self, chat_id: int, *, item_id: str = "", fence: Fence | None = None) -> bool:
        record = await self.get(chat_id)
        if not record.open:
            return False
        self._records[chat_id] = replace(record, state="closed", closed_by=item_id, transcript=())
        return True

    async def bind_topic(self, group_id: int, topic_id: int, chat_id: int) -> None:
        self._topics[group_id, topic_id] = chat_id

    async def chat_of_topic(self, group_id: int, topic_id: int) -> int | None:
        return self._topics.get((group_id, topic_id))

    async def track(self, chat_id: int, *, open: bool | None, reply_within: float | None = None) -> None:
        if open is True:
            self._open.add(chat_id)
        elif open is False:
            self._open.discard(chat_id)
        if reply_within is None:
            self._deadlines.pop(chat_id, None)
        else:
            self._deadlines[chat_id] = self._now() + reply_within

    async def due(self, limit: int = 100) -> list[int]:
        now = self._now()
        return sorted((c for c, at in self._deadlines.items() if at <= now), key=self._deadlines.__getitem__)[:limit]

    async def open_count(self) -> int:
        return len(self._open)

    async def unbind(self, chat_id: int, group_id: int | None, topic_id: int | None) -> None:
        if group_id is not None and topic_id is not None and self._topics.get((group_id, topic_id)) == chat_id:
            del self._topics[group_id, topic_id]
        await self.track(chat_id, open=False)

    def _drop(self, chat_id: int) -> None:
        """Drop the chat's record, transcript and relayed ids (part of /forget)."""
        self._records.pop(chat_id, None)
        self._relayed.pop(chat_id, None)


class InMemoryKnowledgeGaps:
    """KnowledgeGaps of one process: counts per question, and what each chat contributed. With a TTL
    a question's count expires that long after it was last asked, a chat's record that long after the
    chat last asked (as in Redis)."""

    def __init__(self, *, ttl_seconds: float = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self._counts: Counter[str] = Counter()
        self._asked: dict[str, float] = {}
        self._by_chat: dict[int, tuple[Counter[str], float]] = {}
        self._ttl = ttl_seconds
        self._now = clock

    def _prune(self, now: float) -> None:
        if self._ttl <= 0:
            return
        for question in [q for q, at in self._asked.items() if at <= now - self._ttl]:
            self._drop(question)
        for chat_id in [c for c, (_, at) in self._by_chat.items() if at <= now - self._ttl]:
            del self._by_chat[chat_id]

    def _drop(self, question: str) -> None:
        self._counts.pop(question, None)
        self._asked.pop(question, None)

    async def record(self, chat_id: int, question: str) -> None:
        if not worth_recording(question):
            return
        now = self._now()
        self._prune(now)
        question = normalize_question(question)
        self._counts[question] += 1
        self._asked[question] = now
        asked, _ = self._by_chat.get(chat_id, (Counter(), now))
        asked[question] += 1
        self._by_chat[chat_id] = (asked, now)
        if len(self._counts) > GAPS_KEPT:
            self._drop(min(self._counts, key=self._counts.__getitem__))

    async def top(self, limit: int) -> list[tuple[str, int]]:
        self._prune(self._now())
        return self._counts.most_common(limit)

    async def forget(self, chat_id: int) -> None:
        self._prune(self._now())
        asked, _ = self._by_chat.pop(chat_id, (Counter(), 0.0))
        for question, count in asked.items():
            self._counts[question] -= count
            if self._counts[question] <= 0:
                self._drop(question)


class InMemoryBackend:
    """The in-process store and rate limiter (``services.ports.backend.Backend``)."""

    def __init__(self, *, ttl_seconds: int = 0, per_minute: int = 0) -> None:
        self.store = InMemorySessionStore(ttl_seconds=ttl_seconds)
        self.limiter = InMemoryRateLimiter(per_minute=per_minute)
        self.handoffs = InMemoryHandoffStore()
        self.gaps = InMemoryKnowledgeGaps(ttl_seconds=ttl_seconds)
        self.memos = InMemoryMediaMemos(ttl_seconds=ttl_seconds)
        self.albums = InMemoryAlbums(ttl_seconds=ttl_seconds)

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

    async def close(self) -> None:
        await self.store.close()
