"""The partial top-k the ranking uses instead of sorting every passage (a partition, then a sort of
the few kept) returns exactly what a stable sort of every passage would, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from services.knowledge.snapshot import top_indices


@pytest.mark.parametrize("size", [1, 7, 60, 5000])
@pytest.mark.parametrize("depth", [1, 3, 24, 10_000])
def test_the_partialtop_indices_is_the_stable_sort_s_head(size: int, depth: int) -> None:
    values = np.random.default_rng(size * 31 + depth).integers(0, 6, size).astype(np.float32)  # many ties
    assert top_indices(values, depth).tolist() == np.argsort(-values, kind="stable")[:depth].tolist()


def test_mostly_zero_scores_keep_the_index_order_of_the_ties() -> None:
    values = np.zeros(1000, dtype=np.float32)
    values[[900, 5, 400]] = [0.3, 0.9, 0.3]
    assert top_indices(values, 5).tolist() == [5, 400, 900, 0, 1]
