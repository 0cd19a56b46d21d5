"""One built, immutable index of the knowledge: passages, their full-text index, their vectors when
EMBEDDING_MODEL is set, and the search a turn runs (full-text and vector rankings fused by reciprocal
rank). Building is CPU only (call it in a thread); a live refresh builds a new one aside and swaps it."""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from services.core.knowledge import KnowledgeQuery, Passage, Retrieval, ScoredPassage, SkippedFile
from services.knowledge.analysis import PREFIX_CHARS, content_terms, prefixes, terms
from services.knowledge.embedder import QUERY_PAUSE_SECONDS, Embedder, EmbeddingPaused, EmbeddingUnavailable
from services.knowledge.fulltext import FullTextIndex

log = logging.getLogger(__name__)

RRF_K = 60
"""Reciprocal rank fusion: a passage scores the sum of 1 / (RRF_K + rank) over the rankings."""
CANDIDATES = 4
"""Each ranking contributes this many times ``limit`` candidates to the fusion."""
CONTEXT_WEIGHT = 0.5
"""Weight of the older messages and the topic against the new message's own terms; the message just
before a follow-up weighs as much as the follow-up itself: "and what is the maximum number of days?"
is that message's question asked again (``follow_up_context``)."""
CONTEXT_WHEN_TERMS = 3
"""The context joins the query when the new message has this many content terms or fewer and points
back (a follow-up such as "and how do I undo that?"); a full question stands on its own."""
CONTEXT_WHEN_OPENING = 6
"""A message opening with "and", "but", "also", "а", "и", "но" ("and how do I write the result to a
file?") continues the conversation with up to this many content terms of its own."""
_OPENING = re.compile(r"\s*(and|but|also|а|и|но|ещё|еще|также)\b", re.IGNORECASE)
FUNCTION_WEIGHT = 0.5
"""Weight of the question's function words ("how", "which", "can") in the ranking: an FAQ heading
shares them with the question, a reference page's text matches them anywhere."""
PREFIX_WEIGHT = 0.3
"""Weight of the terms' first PREFIX_CHARS characters: inflections the stemmer leaves apart
("кодировок"/"кодировка") and typos past the fifth letter still rank, below a whole match."""
HEADING_WEIGHT = 0.3
"""Weight of the title and headings again on their own: a question whose words are a section's
heading ranks that section above a passage that mentions them in passing."""
UNKNOWN_WEIGHT = 3.0
"""A question's word the documents never use weighs this many times the rarest word they use in the
relevance: it says the question is about something else ("gift cards" where only "card" is known)."""
LONE_WORD_TERMS = 3
"""A passage that shares a single content word (or less) with a question of this many distinct content
words or more has relevance 0: "do you sell gift cards?" is not covered by a refund passage that says
"card"."""
PREFIX_CREDIT = 0.5
"""Share of a term's weight in the relevance when only its head is in the passage."""
VECTOR_Z_NONE = 3.0
VECTOR_Z_FULL = 5.0
VECTOR_MAX_WEIGHT = 3.0
"""The vector ranking's weight in the fusion grows from 0 to VECTOR_MAX_WEIGHT as its best passage
stands out from the index by VECTOR_Z_NONE to VECTOR_Z_FULL standard deviations (``vector_weight``;
chosen on the Debian FAQ with all-MiniLM-L6-v2: benchmarks/knowledge.py)."""
VECTOR_TRUST_PASSAGES = 50
"""Below this many vectors the statistic means little (the best passage of n stands out by at most
sqrt(n - 1) deviations): both rankings weigh 1, plain reciprocal rank fusion."""
_POINTING = re.compile(
    r"\b(that|this|it|its|them|they|those|these|there|same|one|это|этого|этому|эту|этот|эти|то|того|тому|"
    r"его|ее|её|их|им|там|туда|так|такой|такое|тот|та|те|он|она|оно|они|него|неё|нее|ней|ним|нему|нём|нем|"
    r"ему|ей|них|ими|тогда|тоже|также)\b",
    re.IGNORECASE,
)


def _version(passages: Sequence[Passage], model: str | None) -> str:
    digest = hashlib.sha256("\n".join([model or "", *sorted(p.id for p in passages)]).encode())
    return digest.hexdigest()[:12]


def top_indices(values: np.ndarray, depth: int) -> np.ndarray:
    """Indices of the ``depth`` largest values, best first, ties by index: what a stable argsort of
    ``-values`` starts with, in linear time (a partition; only the values above the cut are sorted,
    so a query that matches a handful of 100 k passages does not sort the 100 k zeros)."""
    if depth >= len(values):
        return np.argsort(-values, kind="stable")
    threshold = np.partition(values, len(values) - depth)[len(values) - depth]
    above = np.flatnonzero(values > threshold)
    above = above[np.lexsort((above, -values[above]))]
    ties = np.flatnonzero(values == threshold)[: depth - len(above)]
    return np.concatenate([above, ties])


def vector_weight(similarities: np.ndarray) -> float:
    """How far the vector ranking is trusted for this question (0..VECTOR_MAX_WEIGHT): by how many deviations
    its best passage stands out from the whole index. A model that does not know the question's
    language (an English model asked in Russian) finds every passage about as similar: weight 0, the
    fusion is the full-text ranking and similarity clears no floor."""
    if len(similarities) < VECTOR_TRUST_PASSAGES:
        return 1.0
    spread = float(similarities.std())
    if spread <= 0:
        return 0.0
    z = (float(similarities.max()) - float(similarities.mean())) / spread
    return VECTOR_MAX_WEIGHT * min(max((z - VECTOR_Z_NONE) / (VECTOR_Z_FULL - VECTOR_Z_NONE), 0.0), 1.0)


def _follow_up(message: str, own: Sequence[str]) -> bool:
    """A message that needs the conversation: short and pointing back ("is it free?"), or opening
    with "and"/"а" ("and with powers of 1000?", "а в степенях 1000?") while still short."""
    distinct = len(set(own))
    if _OPENING.match(message):
        return distinct <= CONTEXT_WHEN_OPENING
    return distinct <= CONTEXT_WHEN_TERMS and (not own or bool(_POINTING.search(message)))


def follow_up_context(query: KnowledgeQuery, content: Sequence[str]) -> list[tuple[list[str], float]]:
    """What a follow-up is searched with besides its own terms, with the weight of each: the customer's
    message just before it at 1 (the two are one question), the older ones and the summary's topic at
    CONTEXT_WEIGHT; nothing for a message that stands on its own."""
    if not _follow_up(query.message, content):
        return []
    *older, last = query.recent or ("",)
    context = [(terms(last), 1.0)] if last else []
    far = [term for text in (*older, query.topic or "") for term in terms(text)]
    return [*context, (far, CONTEXT_WEIGHT)] if far else context


@dataclass(frozen=True, slots=True)
class Candidate:
    """A passage a ranking put forward, with its scores, for the search and for ``--explain``."""

    index: int
    fulltext: float
    """The weighed BM25 score (the full-text ranking's order)."""
    relevance: float
    """The floor's measure: the share of the question's content the passage holds (0..1)."""
    similarity: float | None
    fused: float | None
    """The reciprocal rank fusion's score, with a query vector."""
    fulltext_rank: int | None
    vector_rank: int | None
    cut: str | None
    """Why it is not sent: "floor" (below both floors), "limit" (past the top k), None: sent."""


@dataclass(frozen=True)
class IndexSnapshot:
    passages: tuple[Passage, ...]
    skipped: tuple[SkippedFile, ...]
    version: str
    min_score: float
    built_at: float
    documents: int = 0
    min_similarity: float = 0.45
    _index: FullTextIndex = field(repr=False, default_factory=lambda: FullTextIndex([]))
    _prefix: FullTextIndex = field(repr=False, default_factory=lambda: FullTextIndex([]))
    _heads: FullTextIndex = field(repr=False, default_factory=lambda: FullTextIndex([]))
    _embedder: Embedder | None = field(repr=False, default=None)
    _matrix: np.ndarray | None = field(repr=False, default=None)
    _rows: np.ndarray | None = field(repr=False, default=None)
    """Passage index of each row of ``_matrix``."""

    @classmethod
    def build(
        cls,
        *,
        passages: Sequence[Passage],
        skipped: Sequence[SkippedFile] = (),
        min_score: float,
        documents: int = 0,
        vectors: Mapping[str, bytes] | None = None,
        embedder: Embedder | None = None,
        min_similarity: float = 0.45,
    ) -> IndexSnapshot:
        analysed = [terms(f"{' '.join(p.headings)}\n{p.text}") for p in passages]
        index = FullTextIndex(analysed)
        prefix = FullTextIndex([prefixes(d) for d in analysed])
        heads = FullTextIndex([terms(" ".join((p.title, *p.headings))) for p in passages])
        matrix = rows = None
        if embedder is not None and vectors:
            with_vector = [(i, vectors[p.id]) for i, p in enumerate(passages) if p.id in vectors]
            sizes = {len(v) for _, v in with_vector}
            if len(sizes) == 1:
                rows = np.asarray([i for i, _ in with_vector], dtype=np.int64)
                matrix = np.frombuffer(b"".join(v for _, v in with_vector), dtype=np.float32).reshape(len(rows), -1)
            else:
                log.warning("knowledge: cached vectors of different sizes; full-text only until they are rebuilt")
        return cls(
            passages=tuple(passages),
            skipped=tuple(skipped),
            version=_version(passages, embedder.model if embedder is not None and matrix is not None else None),
            min_score=min_score,
            built_at=time.time(),
            documents=documents,
            min_similarity=min_similarity,
            _index=index,
            _prefix=prefix,
            _heads=heads,
            _embedder=embedder,
            _matrix=matrix,
            _rows=rows,
        )

    @classmethod
    def empty(cls, *, min_score: float = 0.2) -> IndexSnapshot:
        return cls.build(passages=(), min_score=min_score)

    @property
    def total_tokens(self) -> int:
        return sum(p.tokens for p in self.passages)

    @property
    def embedded(self) -> int:
        """Passages with a vector."""
        return 0 if self._rows is None else len(self._rows)

    def relevance(self, query: KnowledgeQuery) -> np.ndarray:
        """Full-text relevance (0..1) of every passage: how much of the question's content it covers."""
        return self._scores(query)[1]

    def _scores(self, query: KnowledgeQuery) -> tuple[np.ndarray, np.ndarray]:
        """The ranking (BM25 over the content terms, the function words, the terms' heads and the
        headings, weighed: see the constants) and the relevance (the floor: how much of the question's
        content the passage holds); a follow-up's conversation weighs in both (``follow_up_context``)."""
        own = terms(query.message)
        content = content_terms(own)
        ranking = self._ranking(content, [t for t in own if t not in set(content)])
        covered, bound, held = self._coverage(content)
        if len(set(content)) >= LONE_WORD_TERMS:
            covered = np.where(held > 1, covered, 0.0)  # one shared word of three or more: a coincidence
        for context, weight in follow_up_context(query, content):
            ranking = ranking + weight * self._ranking(content_terms(context), [])
            extra, extra_bound, _ = self._coverage(content_terms(context))
            covered, bound = covered + weight * extra, bound + weight * extra_bound
        relevance = np.minimum(covered / bound, 1.0) if bound > 0 else np.zeros(len(self.passages), dtype=np.float32)
        return ranking, relevance

    def _ranking(self, content: list[str], function: list[str]) -> np.ndarray:
        ranking = self._index.scores(content)
        if function:
            ranking = ranking + FUNCTION_WEIGHT * self._index.scores(function)
        ranking = ranking + PREFIX_WEIGHT * self._prefix.scores(prefixes(content))
        return ranking + HEADING_WEIGHT * self._heads.scores(content)

    def _coverage(self, content: list[str]) -> tuple[np.ndarray, float, np.ndarray]:
        """Per passage, the idf of the question's distinct content terms it holds (a term only its
        head matches counts PREFIX_CREDIT of it), and the idf of them all: the share is what the floor
        compares, whatever the corpus's passage lengths or the language."""
        covered = np.zeros(len(self.passages), dtype=np.float32)
        held = np.zeros(len(self.passages), dtype=np.float32)
        bound = 0.0
        for term in dict.fromkeys(content):
            idf = self._index.idf(term) * (1 if self._index.knows(term) else UNKNOWN_WEIGHT)
            bound += idf
            holding = self._index.holding(term)
            covered[holding] += idf
            held[holding] += 1
            if len(term) > PREFIX_CHARS and not any(ch.isdigit() for ch in term):
                near = np.setdiff1d(self._prefix.holding(term[:PREFIX_CHARS]), holding, assume_unique=True)
                covered[near] += PREFIX_CREDIT * idf
                held[near] += PREFIX_CREDIT
        return covered, bound, held

    def candidates(
        self, query: KnowledgeQuery, *, limit: int, query_vector: np.ndarray | None = None
    ) -> list[Candidate]:
        """Every passage either ranking put forward, with its scores: first the ones sent, best first
        (by full-text order, or with a query vector by the fusion of both rankings, the full text's
        best first while the vector's weight is below 1), then the ones cut by ``limit``, then the
        ones below the floor (a passage clears it by either ranking)."""
        if not self.passages or limit <= 0:
            return []
        ranking, relevance = self._scores(query)
        depth = min(len(self.passages), limit * CANDIDATES)
        text_top = [int(i) for i in top_indices(ranking, depth) if ranking[i] > 0]
        text_rank = {i: rank for rank, i in enumerate(text_top, start=1)}
        similarity: dict[int, float] = {}
        vector_rank: dict[int, int] = {}
        weight = 0.0
        if query_vector is not None and self._matrix is not None and self._rows is not None:
            sims = self._matrix @ query_vector.astype(np.float32)
            weight = vector_weight(sims)
            for rank, row in enumerate(top_indices(sims, depth), start=1):
                vector_rank[int(self._rows[row])] = rank
                similarity[int(self._rows[row])] = float(sims[row])
        found: list[Candidate] = []
        floor_similarity = self.min_similarity if weight > 0 else 2.0  # an untrusted ranking clears nothing
        for i in set(text_rank) | set(vector_rank):
            fused = 1 / (RRF_K + text_rank[i]) if i in text_rank else 0.0
            fused += weight / (RRF_K + vector_rank[i]) if i in vector_rank else 0.0
            below = relevance[i] < self.min_score and similarity.get(i, -1.0) < floor_similarity
            found.append(
                Candidate(
                    i,
                    float(ranking[i]),
                    float(relevance[i]),
                    similarity.get(i),
                    fused if vector_rank else None,
                    text_rank.get(i),
                    vector_rank.get(i),
                    "floor" if below else None,
                )
            )
        if vector_rank:
            # a ranking trusted less than the full text's (weight < 1) adds and reorders passages, but
            # does not displace the full text's best one (its fused score may then be below the next)
            pinned = weight < 1.0
            found.sort(
                key=lambda c: (c.cut is not None, not (pinned and c.fulltext_rank == 1), -(c.fused or 0.0), c.index)
            )
        else:  # full text alone: BM25's order over every term
            found.sort(key=lambda c: (c.cut is not None, c.fulltext_rank or 0))
        kept = sum(c.cut is None for c in found)
        return [replace(c, cut="limit") if n >= limit and n < kept else c for n, c in enumerate(found)]

    def rank(self, query: KnowledgeQuery, *, limit: int, query_vector: np.ndarray | None = None) -> list[ScoredPassage]:
        """Passages above the floor, best first, at most ``limit``; the score shown is the fusion's
        with a query vector, else the full-text relevance."""
        return [
            ScoredPassage(
                self.passages[c.index],
                round(c.fused if c.fused is not None else c.relevance, 4),
                fulltext_rank=c.fulltext_rank,
                vector_rank=c.vector_rank,
            )
            for c in self.candidates(query, limit=limit, query_vector=query_vector)
            if c.cut is None
        ]

    def nearest(self, query_vector: np.ndarray, *, limit: int) -> list[Passage]:
        """The passages most similar to ``query_vector``, best first: the vector ranking alone (the
        benchmark's 'vector only' row)."""
        if self._matrix is None or self._rows is None:
            return []
        sims = self._matrix @ query_vector.astype(np.float32)
        return [self.passages[int(self._rows[row])] for row in top_indices(sims, min(limit, len(sims)))]

    def matched_terms(self, query: KnowledgeQuery, index: int) -> list[str]:
        """The search terms (after stemming) of the question, and of its conversation for a follow-up,
        that passage ``index`` holds; a term only its head matches is shown as ``head*``."""
        own = terms(query.message)
        asked = list(own)
        for context, _ in follow_up_context(query, content_terms(own)):
            asked.extend(context)
        held: list[str] = []
        for term in dict.fromkeys(asked):
            if index in self._index.holding(term):
                held.append(term)
            elif len(term) > PREFIX_CHARS and index in self._prefix.holding(term[:PREFIX_CHARS]):
                held.append(f"{term[:PREFIX_CHARS]}*")
        return list(dict.fromkeys(held))

    async def query_vector(self, query: KnowledgeQuery, *, full_text: bool = False) -> tuple[np.ndarray | None, bool]:
        """The question's vector for the hybrid ranking (None without embeddings), and whether the
        embeddings endpoint failed (the turn ranks by full text only)."""
        if self._embedder is None or self._matrix is None or full_text:
            return None, False
        text = query.message
        if _follow_up(query.message, content_terms(terms(query.message))) and query.recent:
            text = f"{query.recent[-1]}\n{query.message}"
        try:
            return await self._embedder.embed_query(text), False
        except EmbeddingPaused as exc:
            log.debug("knowledge: query embedding %s; this turn ranks by full text only", exc)
        except EmbeddingUnavailable as exc:
            log.warning(
                "knowledge: query embedding failed (%s); turns rank by full text only for %.0f s",
                exc,
                QUERY_PAUSE_SECONDS,
            )
        return None, True

    async def search(self, query: KnowledgeQuery, *, limit: int, full_text: bool = False) -> Retrieval:
        started = time.perf_counter()
        vector, degraded = await self.query_vector(query, full_text=full_text)
        found = self.rank(query, limit=limit, query_vector=vector)
        return Retrieval(tuple(found), self.version, degraded=degraded, seconds=time.perf_counter() - started)
