"""Full-text ranking with bm25s (Lucene BM25) over our own terms, and a relevance in 0..1.

The relevance of a passage is its BM25 score divided by what a passage holding every query term
once, at average length, would score: the sum of the terms' idf (a term the index has never seen
counts as the rarest seen term). So 1.0 means the passage covers the whole question, and a question
about something the documents never mention scores near 0: that is the floor KNOWLEDGE_MIN_SCORE
compares with."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence

import bm25s
import numpy as np

logging.getLogger("bm25s").setLevel(logging.WARNING)  # a DEBUG line per build otherwise


class FullTextIndex:
    def __init__(self, documents: Sequence[Sequence[str]]) -> None:
        """``documents``: the terms of each passage, in passage order."""
        self.size = len(documents)
        self._df: Counter[str] = Counter()
        for document in documents:
            self._df.update(set(document))
        self._bm25: bm25s.BM25 | None = None
        if self.size:
            self._bm25 = bm25s.BM25(method="lucene")
            # an empty passage would be an empty token list: bm25s needs one token per document
            self._bm25.index([list(d) or [""] for d in documents], show_progress=False)

    def idf(self, term: str) -> float:
        """Lucene's idf (bm25s method="lucene")."""
        df = max(self._df.get(term, 0), 1)
        return math.log(1 + (self.size - df + 0.5) / (df + 0.5))

    def bound(self, query: Sequence[str]) -> float:
        """What a passage with every query term once at average length scores."""
        return sum(self.idf(term) for term in query)

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every passage for ``query`` (zeros when nothing matches)."""
        known = [term for term in query if term in self._df]
        if self._bm25 is None or not known:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._bm25.get_scores(known), dtype=np.float32)
