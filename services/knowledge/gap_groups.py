"""Near-duplicate unanswered questions grouped, in any language the analysis stems (Russian, English):
a question is its set of content words, each cut to its stem's first PREFIX_CHARS letters (inflections
the stemmer leaves apart meet there), and joins the group whose first (most asked) question's set is
closest by the Dice coefficient, if at least ``threshold``; else it opens a group. Only the groups
sharing a word are compared (an inverted index), over at most GROUPED_QUESTIONS questions. Given
vectors (EMBEDDING_MODEL), a question sharing too few words joins the group closest in meaning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from services.knowledge.analysis import PREFIX_CHARS, content_terms, terms

GROUPED_QUESTIONS = 1000
"""The most asked questions grouped (the rest are counted, not grouped: bounded work)."""
SIMILARITY = 0.7
"""Dice coefficient of two questions' word sets at which they are one question."""
EXAMPLES = 3
EMBEDDING_SIMILARITY = 0.85
"""With EMBEDDING_MODEL (``knowledge gaps`` only): the cosine at which two questions are one question
though they share few words ("refund" / "money back")."""


@dataclass
class GapGroup:
    """Questions asked in different words: ``count`` is their total, ``examples`` the most asked first."""

    count: int
    examples: list[str] = field(default_factory=list)
    questions: int = 0


@dataclass(frozen=True)
class Grouping:
    groups: list[GapGroup]
    questions: int
    """Questions grouped."""
    left_out: int
    """Questions beyond GROUPED_QUESTIONS, not grouped."""


def signature(question: str) -> frozenset[str]:
    """What a question is about: its content words' stems, cut to their first PREFIX_CHARS letters
    (identifiers with digits whole)."""
    found = content_terms(terms(question))
    return frozenset(t if len(t) <= PREFIX_CHARS or any(c.isdigit() for c in t) else t[:PREFIX_CHARS] for t in found)


def dice(a: frozenset[str], b: frozenset[str]) -> float:
    return 2 * len(a & b) / (len(a) + len(b)) if a or b else 0.0


class _Groups:
    """The groups being built: each one's first question's words (and vector), and which groups each
    word is in (only those are compared by words)."""

    def __init__(self, threshold: float, similar: float, shape: tuple[int, int]) -> None:
        self.groups: list[GapGroup] = []
        self._heads: list[frozenset[str]] = []
        self._holding: dict[str, list[int]] = {}
        self._threshold, self._similar = threshold, similar
        self._vectors = np.zeros(shape, dtype=np.float32)
        """Row g: group g's first question's vector (zeros without one)."""

    def _by_words(self, words: frozenset[str]) -> int | None:
        best, score = None, 0.0
        for g in dict.fromkeys(g for word in words for g in self._holding.get(word, ())):
            similarity = dice(words, self._heads[g])
            if similarity > score:
                best, score = g, similarity
        return best if score >= self._threshold else None

    def _by_vector(self, vector: np.ndarray | None) -> int | None:
        if vector is None or not self.groups or not self._vectors.size:
            return None
        similarities = self._vectors[: len(self.groups)] @ vector
        best = int(np.argmax(similarities))
        return best if float(similarities[best]) >= self._similar else None

    def place(self, question: str, count: int, vector: np.ndarray | None) -> None:
        words = signature(question)
        found = self._by_words(words)
        found = self._by_vector(vector) if found is None else found
        if found is None:
            found = len(self.groups)
            self.groups.append(GapGroup(0))
            self._heads.append(words)
            for word in words:
                self._holding.setdefault(word, []).append(found)
            if vector is not None:
                self._vectors[found] = vector
        group = self.groups[found]
        group.count += count
        group.questions += 1
        if len(group.examples) < EXAMPLES:
            group.examples.append(question)


def group_questions(
    asked: Sequence[tuple[str, int]],
    *,
    threshold: float = SIMILARITY,
    cap: int = GROUPED_QUESTIONS,
    vectors: Mapping[str, np.ndarray] | None = None,
    similar: float = EMBEDDING_SIMILARITY,
) -> Grouping:
    """``asked``: (question, count), any order. Groups sorted by total count, most asked first. With
    ``vectors`` (question → unit vector) a question also joins the group whose first question is at
    least ``similar`` (cosine) to it, when no group shares enough of its words."""
    ordered = sorted(asked, key=lambda pair: -pair[1])
    kept, left_out = ordered[:cap], max(0, len(ordered) - cap)
    dimensions = len(next(iter(vectors.values()))) if vectors else 0
    building = _Groups(threshold, similar, (len(kept) if dimensions else 0, dimensions))
    for question, count in kept:
        building.place(question, count, vectors.get(question) if vectors else None)
    groups = sorted(building.groups, key=lambda group: -group.count)
    return Grouping(groups, len(kept), left_out)
