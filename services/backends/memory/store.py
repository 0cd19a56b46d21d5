"""InMemorySessionStore: the session store of one process (``services.ports.sessions``), versions,
turn ids and replied marks as in Redis; an optional TTL from the last write."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from services.core.errors import ConcurrentUpdateError
from services.core.fence import Fence
from services.core.records import Compaction, NewMessage, Session, StoredMessage
from services.core.summary_state import SummaryState
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
                    chat.next_seq,
                    message.role,
                    message.content,
                    message.tokens,
                    message.knowledge,
                    message.media,
                    message.actions,
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
