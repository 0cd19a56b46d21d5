"""Full-text retrieval over passages with the real bm25s and Snowball stemmers: Russian inflections,
English paraphrases that share a stem, the relevance floor, follow-up questions, and the live library
swapping in a rebuilt index when files change."""

from __future__ import annotations

import asyncio
import os
import time
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import pytest

from services.core.knowledge import KnowledgeQuery, Passage
from services.core.tokens import TokenCounter
from services.knowledge.analysis import content_terms, terms
from services.knowledge.corpus import Corpus, read_corpus
from services.knowledge.library import KnowledgeLibrary
from services.knowledge.snapshot import IndexSnapshot

PASSAGES = [
    Passage("p1", "returns.md", "Returns", ("Refunds",), "Refunds are paid to the original card within 14 days.", 12),
    Passage(
        "p2",
        "returns.md",
        "Returns",
        ("Cancelling an order",),
        "You can cancel an order in your account until it ships. To undo a cancellation, write to support.",
        20,
    ),
    Passage("p3", "delivery.md", "Delivery", ("Delivery times",), "Standard delivery takes 3-5 working days.", 9),
    Passage(
        "p4",
        "ru.md",
        "Возврат",
        ("Возврат денег",),
        "Деньги за заказ возвращаются на карту в течение 14 дней после получения посылки.",
        20,
    ),
    Passage("p5", "ru.md", "Возврат", ("Доставка",), "Доставка курьером занимает от трёх до пяти рабочих дней.", 14),
    Passage("p6", "orders.md", "Orders", ("Order A-12345",), "Order A-12345 is the sample order of the manual.", 12),
]


def search(query: KnowledgeQuery, *, min_score: float = 0.2) -> list[str]:
    snapshot = IndexSnapshot.build(passages=PASSAGES, min_score=min_score)
    return [s.passage.id for s in asyncio.run(snapshot.search(query, limit=3)).passages]


def test_terms_stem_each_word_in_its_own_language_and_keep_identifiers() -> None:
    assert terms("Доставки курьером") == terms("доставка Курьеры")
    assert terms("refunds refunded") == ["refund", "refund"]
    assert "a-12345" in terms("where is order A-12345?")
    assert terms("how do I do it") == ["how", "do", "do"], "only Lucene's 33 English stop words go"
    assert content_terms(terms("how do I do it")) == [], "what the floor weighs leaves the function words out"
    assert terms("как мне это сделать") == ["сдела"], "Russian stop words; Cyrillic is stemmed, not dropped"
    assert terms("Ёлка") == terms("елка")


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("when will my refund be paid?", "p1"),
        ("как долго длится доставка курьером?", "p5"),
        ("сколько дней ждать возврата денег за заказ", "p4"),
        ("what about order a-12345", "p6"),
        ("how many days does delivery take", "p3"),
    ],
)
def test_a_paraphrased_question_finds_its_passage_first(question: str, expected: str) -> None:
    assert search(KnowledgeQuery(question))[:1] == [expected]


@pytest.mark.parametrize("question", ["what is the weather in Paris?", "какой сегодня курс биткоина", "hello"])
def test_a_question_the_documents_do_not_cover_gets_no_passage(question: str) -> None:
    assert search(KnowledgeQuery(question)) == []


def test_the_floor_decides() -> None:
    question = KnowledgeQuery("refund to a gift card bought abroad last winter")
    assert search(question, min_score=0.0)[:1] == ["p1"]
    assert search(question, min_score=0.9) == []


def test_a_follow_up_leans_on_the_previous_question_but_a_new_question_does_not() -> None:
    follow_up = KnowledgeQuery("and how do I undo that?", recent=("how do I cancel my order",))
    assert search(follow_up)[:1] == ["p2"]
    unrelated = KnowledgeQuery("what about the weather?", recent=("how do I cancel my order",))
    assert search(unrelated) == []
    fresh = KnowledgeQuery("how many days does delivery take", recent=("how do I cancel my order",))
    assert search(fresh)[:1] == ["p3"]


def test_an_empty_index_finds_nothing() -> None:
    assert asyncio.run(IndexSnapshot.empty().search(KnowledgeQuery("refund"), limit=3)).passages == ()


async def test_the_library_swaps_in_a_rebuilt_index_when_files_change(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Refunds\n\nRefunds are paid within 14 days.\n")
    library = KnowledgeLibrary(
        root=tmp_path,
        counter=TokenCounter.for_encoding(),
        passage_tokens=100,
        max_file_bytes=10**6,
        min_score=0.2,
        refresh_seconds=60,
    )
    settle(tmp_path)
    library.load()
    first = library.current()
    assert await library.refresh() is False, "nothing changed: no rebuild"
    (tmp_path / "b.md").write_text("# Delivery\n\nDelivery takes 3-5 working days.\n")
    assert await library.refresh() is True
    second = library.current()
    assert second.version != first.version and len(second.passages) == 2
    found = await first.search(KnowledgeQuery("how long does delivery take"), limit=3)
    assert found.passages == (), "a turn holding the old snapshot keeps a whole, consistent index"
    (tmp_path / "a.md").write_text("# Refunds\n\nRefunds are paid within 30 days.\n")
    assert await library.refresh() is True
    assert any("30 days" in p.text for p in library.current().passages)
    (tmp_path / "b.md").unlink()
    assert await library.refresh() is True
    assert [p.document for p in library.current().passages] == ["a.md"]


def live_library(root: Path, **reader: Any) -> KnowledgeLibrary:
    return KnowledgeLibrary(
        root=root,
        counter=TokenCounter.for_encoding(),
        passage_tokens=100,
        max_file_bytes=10**6,
        min_score=0.2,
        refresh_seconds=60,
        **reader,
    )


def settle(root: Path) -> None:
    """Every file's modification time a minute back: files that fresh count as possibly still changing
    (read again at every look, services/knowledge/corpus.py RACY_NS), which these tests are not about."""
    then = time.time_ns() - 60_000_000_000
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(then, then))


def library_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "services.knowledge.library" and r.levelno >= WARNING]


async def test_a_failed_rebuild_keeps_the_last_good_index(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The corpus reader is injected (the public seam): it reads the folder, then fails before the
    index is built. No half-built index is ever current, one WARNING line tells, the next refresh
    after the fault clears swaps the folder in."""
    (tmp_path / "a.md").write_text("# Refunds\n\nRefunds are paid within 14 days.\n")
    failing = [True]
    calls = [0]

    def reader(root: Path, **options: Any) -> Corpus:
        calls[0] += 1
        corpus = read_corpus(root, **options)
        if failing[0]:
            raise MemoryError(f"out of memory while indexing (attempt {calls[0]})")
        return corpus

    library = live_library(tmp_path, reader=reader)
    failing[0] = False
    library.load()
    good = library.current()
    (tmp_path / "b.md").write_text("# Delivery\n\nDelivery takes 3-5 working days.\n")
    failing[0] = True
    assert await library.refresh() is False
    assert await library.refresh() is False, "still failing (another message): retried, not logged again"
    assert calls[0] == 3
    assert library.current() is good and [p.document for p in good.passages] == ["a.md"]
    warnings = library_warnings(caplog)
    assert len(warnings) == 1 and "MemoryError" in warnings[0] and "previous index" in warnings[0], warnings
    failing[0] = False
    assert await library.refresh() is True
    assert sorted(p.document for p in library.current().passages) == ["a.md", "b.md"]


@pytest.mark.parametrize("fault", ["deleted", "unmounted", "not a folder"])
async def test_a_vanished_folder_keeps_the_last_good_index(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    """KNOWLEDGE_DIR deleted, unmounted (the mount point left empty) or replaced by a file: the last
    good index keeps serving, with one WARNING line however many refreshes look; the same folder back
    is told once (INFO) and a second outage warns again; changed documents are read again."""
    root, away = tmp_path / "kb", tmp_path / "away"
    root.mkdir()
    caplog.set_level(INFO, logger="services.knowledge.library")
    (root / "a.md").write_text("# Refunds\n\nRefunds are paid within 14 days.\n")
    settle(root)
    library = live_library(root)
    library.load()
    good = library.current()

    def vanish() -> None:
        root.rename(away)
        if fault == "unmounted":
            root.mkdir()
        elif fault == "not a folder":
            root.write_text("not a folder")

    def come_back() -> None:
        if root.is_file():
            root.unlink()
        elif root.exists():
            root.rmdir()
        away.rename(root)

    vanish()
    for _ in range(3):
        assert await library.refresh() is False
    assert library.current() is good
    found = await library.current().search(KnowledgeQuery("when are refunds paid"), limit=3)
    assert [s.passage.document for s in found.passages] == ["a.md"]
    warnings = library_warnings(caplog)
    assert len(warnings) == 1 and str(root) in warnings[0] and "previous index" in warnings[0], warnings
    come_back()
    assert await library.refresh() is False, "the same files: nothing to rebuild"
    assert library.current() is good and "reads again" in caplog.text
    vanish()
    assert await library.refresh() is False
    assert len(library_warnings(caplog)) == 2, "a second outage is told again"
    come_back()
    (root / "a.md").write_text("# Refunds\n\nRefunds are paid within 30 days.\n")
    assert await library.refresh() is True
    assert [p.text for p in library.current().passages] == ["Refunds are paid within 30 days."]
    assert len(library_warnings(caplog)) == 2
