"""The transcription prompt from the knowledge documents: the product names and codes in their
titles and headings ("AX-3000", "ProLine", "DHL"), which speech models otherwise misspell. Computed
once per knowledge snapshot."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from services.core.knowledge import Passage
from services.media.transcriber import vocabulary_prompt

MAX_TERMS = 40
_TERM = re.compile(r"\b(?:[A-Za-z]+[-/]?\d[\w-]*|\d+[A-Za-z][\w-]*|[A-Z][a-z]*[A-Z][\w-]*|[A-Z]{2,}[\w-]*)\b")


def glossary_terms(passages: Sequence[Passage], *, limit: int = MAX_TERMS) -> list[str]:
    """Distinct product-like words of the passages' titles and headings, the most frequent first."""
    counts: Counter[str] = Counter()
    for passage in passages:
        for line in (passage.title, *passage.headings):
            counts.update(_TERM.findall(line))
    return [term for term, _ in counts.most_common(limit)]


class Glossary:
    """ "Glossary: A, B, C." for the transcription prompt (None when the documents name nothing),
    computed again only when the knowledge snapshot's passages change."""

    def __init__(self) -> None:
        self._passages: Sequence[Passage] | None = None
        self._prompt: str | None = None

    def __call__(self, passages: Sequence[Passage]) -> str | None:
        if passages is not self._passages:
            terms = glossary_terms(passages)
            self._passages, self._prompt = passages, vocabulary_prompt(terms)
        return self._prompt
