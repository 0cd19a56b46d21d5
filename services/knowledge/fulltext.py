"""Full-text ranking with bm25s (Lucene BM25) over our own terms, Lucene's idf, and which passages
hold a term (the relevance floor of snapshot.py counts the question's words a passage holds)."""

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
        postings: dict[str, list[int]] = {}
        for number, document in enumerate(documents):
            for term in set(document):
                postings.setdefault(term, []).append(number)
        self._postings = {term: np.asarray(found, dtype=np.int64) for term, found in postings.items()}
        self._df.update({term: len(found) for term, found in postings.items()})
        self._bm25: bm25s.BM25 | None = None
        if self.size:
            self._bm25 = bm25s.BM25(method="lucene")
            # an empty passage would be an empty token list: bm25s needs one token per document
            self._bm25.index([list(d) or [""] for d in documents], show_progress=False)

    def idf(self, term: str) -> float:
        """Lucene's idf (bm25s method="lucene")."""
        df = max(self._df.get(term, 0), 1)
        return math.log(1 + (self.size - df + 0.5) / (df + 0.5))

    def knows(self, term: str) -> bool:
        return term in self._df

    def holding(self, term: str) -> np.ndarray:
        """The passages that hold ``term``, in passage order."""
        return self._postings.get(term, np.zeros(0, dtype=np.int64))

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every passage for ``query`` (zeros when nothing matches)."""
        known = [term for term in query if term in self._df]
        if self._bm25 is None or not known:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._bm25.get_scores(known), dtype=np.float32)
