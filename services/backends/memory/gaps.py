"""InMemoryKnowledgeGaps: the questions the documents did not answer, counted in one process
(``services.ports.knowledge``)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from services.knowledge.gaps import GAPS_KEPT, normalize_question, worth_recording


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
