"""Near-duplicate unanswered questions grouped, in any language the analysis stems (Russian, English):
a question is its set of content words, each cut to its stem's first PREFIX_CHARS letters (inflections
the stemmer leaves apart meet there), and joins the group whose first (most asked) question's set is
closest by the Dice coefficient, if at least ``threshold``; else it opens a group. Only the groups
sharing a word are compared (an inverted index), over at most GROUPED_QUESTIONS questions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from services.knowledge.analysis import PREFIX_CHARS, content_terms, terms

GROUPED_QUESTIONS = 1000
"""The most asked questions grouped (the rest are counted, not grouped: bounded work)."""
SIMILARITY = 0.7
"""Dice coefficient of two questions' word sets at which they are one question."""
EXAMPLES = 3


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


def group_questions(
    asked: Sequence[tuple[str, int]], *, threshold: float = SIMILARITY, cap: int = GROUPED_QUESTIONS
) -> Grouping:
    """``asked``: (question, count), any order. Groups sorted by total count, most asked first."""
    ordered = sorted(asked, key=lambda pair: -pair[1])
    kept, left_out = ordered[:cap], max(0, len(ordered) - cap)
    groups: list[GapGroup] = []
    heads: list[frozenset[str]] = []
    holding: dict[str, list[int]] = {}
    for question, count in kept:
        words = signature(question)
        shared = dict.fromkeys(g for word in words for g in holding.get(word, ()))
        best, score = -1, 0.0
        for g in shared:
            similarity = dice(words, heads[g])
            if similarity > score or (similarity == score and g < best):
                best, score = g, similarity
        if best < 0 or score < threshold:
            best = len(groups)
            groups.append(GapGroup(0))
            heads.append(words)
            for word in words:
                holding.setdefault(word, []).append(best)
        group = groups[best]
        group.count += count
        group.questions += 1
        if len(group.examples) < EXAMPLES:
            group.examples.append(question)
    groups.sort(key=lambda group: -group.count)
    return Grouping(groups, len(kept), left_out)
