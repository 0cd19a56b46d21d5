"""The fusion trusts the vector ranking only as far as it tells passages apart: an embedding model
that does not know the question's language (all-MiniLM-L6-v2 asked in Russian: the hybrid fell from
0.743 to 0.400 recall@1 on the Debian FAQ) finds every passage about as similar, and must neither
reorder the full-text ranking nor clear the floor by similarity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from openai import AsyncOpenAI

from services.backends.embeddings_disk import DiskEmbeddingCache
from services.core.knowledge import KnowledgeQuery, Passage
from services.knowledge.embedder import Embedder
from services.knowledge.snapshot import VECTOR_TRUST_PASSAGES, IndexSnapshot, vector_weight

SIZE = VECTOR_TRUST_PASSAGES + 10


def snapshot(tmp_path: Path, vectors: np.ndarray) -> IndexSnapshot:
    passages = [Passage("refunds", "faq.md", "FAQ", ("Refunds",), "Refunds reach the card in 14 days.", 9)]
    for i in range(SIZE - 1):
        passages.append(Passage(f"p{i}", "faq.md", "FAQ", (f"Note {i}",), f"Delivery note number {i}.", 5))
    embedder = Embedder(
        client=AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1"),
        model="m",
        cache=DiskEmbeddingCache(directory=tmp_path),
    )
    return IndexSnapshot.build(
        passages=passages,
        min_score=0.1,
        vectors={p.id: vectors[i].astype(np.float32).tobytes() for i, p in enumerate(passages)},
        embedder=embedder,
        min_similarity=0.45,
    )


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def test_a_ranking_that_finds_everything_alike_leaves_the_full_text_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    base = unit(rng.standard_normal(32))
    vectors = unit(base + 0.05 * rng.standard_normal((SIZE, 32)))  # every passage about as similar (~0.96)
    index = snapshot(tmp_path, vectors)
    assert vector_weight(vectors @ base) == 0.0
    question = KnowledgeQuery("when do refunds reach the card?")
    fused = [s.passage.id for s in index.rank(question, limit=6, query_vector=base)]
    assert fused == [s.passage.id for s in index.rank(question, limit=6)] == ["refunds"]


def test_a_ranking_whose_best_passage_stands_out_is_fused(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    vectors = unit(rng.standard_normal((SIZE, 32)))
    index = snapshot(tmp_path, vectors)
    assert vector_weight(vectors @ vectors[5]) > 1.0
    fused = [s.passage.id for s in index.rank(KnowledgeQuery("parcel"), limit=6, query_vector=vectors[5])]
    assert fused[:1] == ["p4"], "the passage the vector finds is sent though no word matches"


def test_a_ranking_trusted_less_than_the_full_text_does_not_displace_its_best_passage(tmp_path: Path) -> None:
    """Benchmark question (man pages, Russian): «сколько серверов имён можно прописать в resolv.conf»
    was first by full text and seventh in the hybrid: all-MiniLM-L6-v2 knows only the word
    "resolv.conf", which made one passage stand out enough for a weight of 0.57, and at reciprocal
    rank fusion's flat scale that lifted a passage the full text ranked lower above its best one."""
    rng = np.random.default_rng(5)
    query = unit(rng.standard_normal(32))
    noise = unit(rng.standard_normal((SIZE, 32)))
    noise = unit(noise - np.outer(noise @ query, query))  # orthogonal to the query
    similarity = 0.2 + 0.05 * rng.standard_normal(SIZE)
    similarity[0] = similarity[1:].min()  # the refunds passage: the vector ranking's last
    similarity[5] = 0.2 + 4.2 * 0.05  # "card": stands out a little from the rest (weight ~0.6)
    vectors = similarity[:, None] * query + np.sqrt(1 - similarity**2)[:, None] * noise
    weight = vector_weight(vectors @ query)
    assert 0.0 < weight < 1.0
    passages = [Passage("refunds", "faq.md", "FAQ", ("Refunds",), "Refunds reach the card in 14 days.", 9)]
    passages += [
        Passage(f"p{i}", "faq.md", "FAQ", (f"Note {i}",), f"Delivery note number {i}.", 5) for i in range(SIZE - 1)
    ]
    passages[5] = Passage("card", "faq.md", "FAQ", ("Cards",), "We take a card.", 4)
    index = IndexSnapshot.build(
        passages=passages,
        min_score=0.0,  # floors off: the order is what is measured
        vectors={p.id: vectors[i].astype(np.float32).tobytes() for i, p in enumerate(passages)},
        embedder=snapshot(tmp_path, vectors)._embedder,
        min_similarity=0.45,
    )
    question = KnowledgeQuery("when do refunds reach the card?")
    assert [s.passage.id for s in index.rank(question, limit=6)][:2] == ["refunds", "card"]
    fused = [s.passage.id for s in index.rank(question, limit=6, query_vector=query)]
    assert fused[:2] == ["refunds", "card"], "the vector may reorder below, not displace the full text's best"
