"""One built, immutable index of the knowledge: passages, their full-text index and the search a turn
runs. Building is CPU only (call it in a thread); a live refresh builds a new one aside and swaps it."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from services.knowledge.analysis import terms
from services.knowledge.fulltext import FullTextIndex
from services.ports.knowledge import KnowledgeQuery, Passage, Retrieval, ScoredPassage, SkippedFile

CONTEXT_WEIGHT = 0.5
"""Weight of the earlier messages and the topic against the new message's own terms."""
CONTEXT_WHEN_TERMS = 3
"""The context joins the query when the new message has this many content terms or fewer and points
back (a follow-up such as "and how do I undo that?"); a full question stands on its own."""
_POINTING = re.compile(
    r"\b(that|this|it|its|them|they|those|these|there|same|one|это|этого|этому|эту|этот|эти|то|того|тому|"
    r"его|ее|её|их|им|там|туда|так|такой|такое|тот|та|те)\b",
    re.IGNORECASE,
)


def _version(passages: Sequence[Passage]) -> str:
    digest = hashlib.sha256("\n".join(sorted(p.id for p in passages)).encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class IndexSnapshot:
    passages: tuple[Passage, ...]
    skipped: tuple[SkippedFile, ...]
    version: str
    min_score: float
    built_at: float
    documents: int = 0
    _index: FullTextIndex = field(repr=False, default_factory=lambda: FullTextIndex([]))

    @classmethod
    def build(
        cls,
        *,
        passages: Sequence[Passage],
        skipped: Sequence[SkippedFile] = (),
        min_score: float,
        documents: int = 0,
    ) -> IndexSnapshot:
        index = FullTextIndex([terms(f"{' '.join(p.headings)}\n{p.text}") for p in passages])
        return cls(
            passages=tuple(passages),
            skipped=tuple(skipped),
            version=_version(passages),
            min_score=min_score,
            built_at=time.time(),
            documents=documents,
            _index=index,
        )

    @classmethod
    def empty(cls, *, min_score: float = 0.2) -> IndexSnapshot:
        return cls.build(passages=(), min_score=min_score)

    @property
    def total_tokens(self) -> int:
        return sum(p.tokens for p in self.passages)

    def rank(self, query: KnowledgeQuery, *, limit: int) -> list[ScoredPassage]:
        """Passages by relevance (0..1), best first, above the floor, at most ``limit``."""
        if not self.passages or limit <= 0:
            return []
        own = terms(query.message)
        context: list[str] = []
        if len(set(own)) <= CONTEXT_WHEN_TERMS and (not own or _POINTING.search(query.message)):
            for text in (*query.recent, query.topic or ""):
                context.extend(terms(text))
        if not own and not context:
            return []
        scores = self._index.scores(own)
        bound = self._index.bound(own)
        if context:
            scores = scores + CONTEXT_WEIGHT * self._index.scores(context)
            bound += CONTEXT_WEIGHT * self._index.bound(context)
        relevance = np.minimum(scores / bound, 1.0) if bound > 0 else np.zeros_like(scores)
        count = min(limit, len(self.passages))
        top = np.argpartition(-relevance, count - 1)[:count]
        ordered = sorted(top.tolist(), key=lambda i: (-float(relevance[i]), i))
        return [
            ScoredPassage(self.passages[i], round(float(relevance[i]), 4), fulltext_rank=rank)
            for rank, i in enumerate(ordered, start=1)
            if relevance[i] >= self.min_score and relevance[i] > 0
        ]

    async def search(self, query: KnowledgeQuery, *, limit: int) -> Retrieval:
        started = time.perf_counter()
        found = self.rank(query, limit=limit)
        return Retrieval(tuple(found), self.version, seconds=time.perf_counter() - started)
