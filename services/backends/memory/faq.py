"""InMemoryLearnedFaq: the learned FAQ entries and the digest marks of one process
(``services.ports.knowledge.LearnedFaq``; nothing survives a restart)."""

from __future__ import annotations

import time

from services.core.knowledge import DigestPost, FaqEntry


class InMemoryLearnedFaq:
    def __init__(self) -> None:
        self._versions: dict[str, list[FaqEntry]] = {}
        self._live: set[str] = set()
        self._revision = 0
        self._days: set[str] = set()
        self._posts: dict[int, DigestPost] = {}
        self._made: dict[str, str] = {}

    async def add(self, questions: tuple[str, ...], answer: str, *, author: str, key: str | None = None) -> FaqEntry:
        if key is not None and key in self._made:
            return self._versions[self._made[key]][0]
        entry = FaqEntry(str(len(self._versions) + 1), questions, answer, author, time.time(), 1)
        self._versions[entry.id] = [entry]
        self._live.add(entry.id)
        self._revision += 1
        if key is not None:
            self._made[key] = entry.id
        return entry

    async def edit(self, entry_id: str, questions: tuple[str, ...], answer: str, *, author: str) -> FaqEntry | None:
        if entry_id not in self._live:
            return None
        versions = self._versions[entry_id]
        entry = FaqEntry(entry_id, questions, answer, author, time.time(), len(versions) + 1)
        versions.append(entry)
        self._revision += 1
        return entry

    async def remove(self, entry_id: str) -> bool:
        if entry_id not in self._live:
            return False
        self._live.discard(entry_id)
        self._revision += 1
        return True

    async def entries(self) -> list[FaqEntry]:
        return [self._versions[i][-1] for i in sorted(self._live, key=int)]

    async def history(self, entry_id: str) -> list[FaqEntry]:
        return list(self._versions.get(entry_id, ()))

    async def revision(self) -> int:
        return self._revision

    async def claim_digest(self, day: str) -> bool:
        if day in self._days:
            return False
        self._days.add(day)
        return True

    async def release_digest(self, day: str) -> None:
        self._days.discard(day)

    async def remember_post(self, message_id: int, post: DigestPost) -> None:
        self._posts[message_id] = post

    async def post(self, message_id: int) -> DigestPost | None:
        return self._posts.get(message_id)
