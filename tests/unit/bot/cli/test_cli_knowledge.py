"""``python -m bot knowledge search``: the list reads in the order it is sorted by. Full text alone
ranks by BM25 while the relevance (what clears KNOWLEDGE_MIN_SCORE) can be higher lower down: the
output used to print that relevance as the score (#1 0.598, #2 0.696), now it leads with the rank."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import cast

from bot.cli.knowledge import search
from services.core.knowledge import KnowledgeQuery, Passage, Retrieval, ScoredPassage
from services.core.tokens import TokenCounter
from services.knowledge.library import KnowledgeLibrary


def passage(name: str) -> Passage:
    return Passage(id=f"id-{name}", document=f"{name}.md", title=name, headings=(name,), text=f"about {name}", tokens=5)


class Found:
    """What a snapshot's search returned (the ranking itself is tested in test_knowledge_ranking)."""

    def __init__(self, *scored: ScoredPassage) -> None:
        self.retrieval = Retrieval(scored, "v1")

    def current(self) -> Found:
        return self

    async def search(self, query: KnowledgeQuery, *, limit: int) -> Retrieval:
        return self.retrieval


async def listed(found: Found) -> str:
    out = io.StringIO()
    assert await search(cast(KnowledgeLibrary, found), "refund?", limit=4, out=out) == 0
    return out.getvalue()


def sort_keys(text: str) -> list[str]:
    """The first figure of each ranked line: what the list reads as sorted by."""
    return re.findall(r"^\d+\. \D*?([\d.]+)", text, re.MULTILINE)


async def test_full_text_results_lead_with_the_rank_they_are_sorted_by() -> None:
    text = await listed(
        Found(ScoredPassage(passage("a"), 0.598, fulltext_rank=1), ScoredPassage(passage("b"), 0.696, fulltext_rank=2))
    )
    assert sort_keys(text) == ["1", "2"], text
    assert "1. full-text #1 (relevance 0.598)  a.md › a  [id-a]" in text
    assert "full-text (BM25) rank" in text.splitlines()[0]


async def test_fused_results_lead_with_the_fused_score_they_are_sorted_by() -> None:
    text = await listed(
        Found(
            ScoredPassage(passage("a"), 0.0325, fulltext_rank=2, vector_rank=1),
            ScoredPassage(passage("b"), 0.0318, fulltext_rank=1, vector_rank=3),
        )
    )
    keys = [float(k) for k in sort_keys(text)]
    assert keys == sorted(keys, reverse=True) == [0.0325, 0.0318], text
    assert "fused rank" in text.splitlines()[0]


async def test_a_real_folder_searched_prints_its_order(tmp_path: Path) -> None:
    (tmp_path / "returns.md").write_text("# Returns\n\n## Refunds\n\nRefunds are paid to the card within 14 days.\n")
    library = KnowledgeLibrary(
        root=tmp_path,
        counter=TokenCounter.for_encoding(),
        passage_tokens=100,
        max_file_bytes=10**6,
        min_score=0.1,
        refresh_seconds=60,
    )
    library.load()
    out = io.StringIO()
    assert await search(library, "when are refunds paid?", limit=4, out=out) == 0
    assert "1. full-text #1 (relevance " in out.getvalue() and "returns.md › Returns › Refunds" in out.getvalue()
