"""KNOWLEDGE_DIR read over real files of every format: a PDF written by a PDF library (fpdf2), an
encrypted one (pypdf), a help-center HTML export, Markdown with front matter, and junk that must be
skipped with one log line naming the file and the reason."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter

from services.core.tokens import TokenCounter
from services.knowledge.corpus import ParsedFiles, fingerprint, read_corpus

COUNTER = TokenCounter.for_encoding()
HTML_EXPORT = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Delivery | Help Center</title>
<link rel="canonical" href="https://help.example.com/delivery">
<style>body { color: red }</style><script>var tracking = "</p>never text";</script></head>
<body><header><nav><a href="/">Home</a> › <a href="/help">Help</a></nav></header>
<main><h1>Delivery</h1>
<h2>Delivery times</h2><p>Standard delivery takes 3&ndash;5 working days inside the EU.</p>
<p>Express delivery arrives the next working day when ordered before 14:00.</p>
<h2>Frequently asked questions</h2>
<details><summary>Can I change the delivery address?</summary><p>Yes, until the parcel is handed to the
courier: open the order and choose <b>Change address</b>.</p></details>
<dl><dt>Do you ship to Norway?</dt><dd>Yes, with customs duties paid by the recipient.</dd></dl>
<table><tr><th>Zone</th><th>Price</th></tr><tr><td>EU</td><td>4.90 EUR</td></tr></table>
</main><footer>© Example Ltd · Cookie settings</footer></body></html>
"""
MARKDOWN = """---
title: "Returns policy"
url: https://help.example.com/returns
---
# Returns

## Refunds

Refunds are paid to the original card within 14 days after we receive the parcel.

## FAQ

**Can I return a sale item?**

Yes, sale items can be returned within 30 days like any other item.

- Keep the original box.
- Print the return label from your account.
"""
RUSSIAN = """# Возврат и обмен

## Возврат денег

Деньги за заказ возвращаются на карту в течение 14 дней после получения посылки на складе.
"""


def write_pdf(path: Path) -> None:
    pdf = FPDF()
    pdf.set_title("Warranty terms")
    for page in range(2):
        pdf.add_page()
        pdf.set_font("helvetica", size=16)
        pdf.cell(0, 10, f"Warranty part {page + 1}", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("helvetica", size=11)
        pdf.multi_cell(
            0,
            6,
            "Every device carries a two-year warranty from the date of delivery. A defect covered by the "
            "warranty is repaired or the device is replaced free of charge.",
        )
        pdf.ln(8)
        pdf.multi_cell(0, 6, "Damage caused by a fall or by water is not covered by the warranty.")
    pdf.output(str(path))


@pytest.fixture
def knowledge_dir(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    (root / "policies" / "old").mkdir(parents=True)
    (root / "returns.md").write_text(MARKDOWN)
    (root / "policies" / "ru.md").write_text(RUSSIAN)
    (root / "policies" / "delivery.html").write_text(HTML_EXPORT)
    (root / "notes.txt").write_text("Opening hours\n=============\n\nThe support line is open 9:00-18:00 CET.\n")
    write_pdf(root / "policies" / "warranty.pdf")
    writer = PdfWriter(clone_from=PdfReader(root / "policies" / "warranty.pdf"))
    writer.encrypt("secret")
    writer.write(root / "policies" / "old" / "locked.pdf")
    (root / "broken.pdf").write_bytes((root / "policies" / "warranty.pdf").read_bytes()[:300])
    (root / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (root / "empty.md").write_text("  \n")
    (root / "legacy.txt").write_bytes("Возврат товара".encode("cp1251"))
    (root / "huge.txt").write_text("x" * 5000)
    (root / "image.png").write_bytes(b"\x89PNG")
    (root / ".hidden.md").write_text("# secret")
    (root / "draft.md~").write_text("# draft")
    return root


def test_every_format_is_read_into_titled_passages(knowledge_dir: Path) -> None:
    corpus = read_corpus(knowledge_dir, counter=COUNTER, passage_tokens=60, max_file_bytes=4000)
    by_doc: dict[str, list[str]] = {}
    for passage in corpus.passages:
        by_doc.setdefault(passage.document, []).append(passage.source)
        assert passage.tokens == COUNTER.count_text(passage.text) <= 60
    assert sorted(by_doc) == [
        "notes.txt",
        "policies/delivery.html",
        "policies/ru.md",
        "policies/warranty.pdf",
        "returns.md",
    ]
    returns = [p for p in corpus.passages if p.document == "returns.md"]
    assert {p.title for p in returns} == {"Returns policy"}
    assert {p.url for p in returns} == {"https://help.example.com/returns"}
    assert "returns.md › Returns › Refunds" in by_doc["returns.md"]
    sale = next(p for p in returns if "sale items" in p.text)
    assert sale.headings[-1] == "Can I return a sale item?", "a FAQ question heads its answer"
    html = [p for p in corpus.passages if p.document == "policies/delivery.html"]
    assert {p.url for p in html} == {"https://help.example.com/delivery"}
    html_text = " ".join(p.text for p in html)
    assert "3–5 working days" in html_text and "4.90 EUR" in html_text
    assert "never text" not in html_text and "Cookie settings" not in html_text and "Home" not in html_text
    faq = next(p for p in html if "Change address" in p.text)
    assert faq.headings == ("Delivery", "Frequently asked questions", "Can I change the delivery address?")
    norway = next(p for p in html if "customs" in p.text)
    assert norway.headings[-1] == "Do you ship to Norway?"
    pdf = [p for p in corpus.passages if p.document == "policies/warranty.pdf"]
    assert any("two-year warranty" in p.text for p in pdf) and pdf[0].title == "Warranty terms"
    assert any("Возврат денег" in p.source for p in corpus.passages)
    notes = next(p for p in corpus.passages if p.document == "notes.txt")
    assert notes.headings == ("Opening hours",)


def test_unreadable_files_are_skipped_with_one_line_each(knowledge_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="services.knowledge"):
        corpus = read_corpus(knowledge_dir, counter=COUNTER, passage_tokens=60, max_file_bytes=4000)
    reasons = {s.path: s.reason for s in corpus.skipped}
    assert reasons == {
        "binary.txt": "binary file (NUL bytes)",
        "broken.pdf": reasons["broken.pdf"],
        "empty.md": "empty",
        "huge.txt": "5000 bytes, over KNOWLEDGE_MAX_FILE_BYTES=4000",
        "image.png": "unsupported type .png",
        "legacy.txt": "not UTF-8 (byte 0)",
        "policies/old/locked.pdf": "encrypted PDF",
    }
    assert reasons["broken.pdf"].startswith("broken PDF")
    lines = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(lines) == len(reasons)
    for path, reason in reasons.items():
        assert sum(path in line and reason in line for line in lines) == 1


def test_passage_ids_are_stable_and_a_long_section_is_split_within_the_limit(tmp_path: Path) -> None:
    sentences = " ".join(f"Sentence number {n} explains one more detail of the warranty terms." for n in range(60))
    (tmp_path / "long.md").write_text(f"# Terms\n\n{sentences}\n\nAnother paragraph.\n")
    first = read_corpus(tmp_path, counter=COUNTER, passage_tokens=80, max_file_bytes=10**6)
    second = read_corpus(tmp_path, counter=COUNTER, passage_tokens=80, max_file_bytes=10**6)
    assert [p.id for p in first.passages] == [p.id for p in second.passages]
    assert len(first.passages) > 5 and all(p.tokens <= 80 for p in first.passages)
    assert all(p.text.endswith((".", "paragraph.")) for p in first.passages), "cut at sentence ends"
    words = " ".join(p.text for p in first.passages).split()
    assert words == f"{sentences} Another paragraph.".split(), "nothing lost or doubled"


def test_a_missing_folder_is_an_empty_corpus_not_a_crash(tmp_path: Path) -> None:
    corpus = read_corpus(tmp_path / "absent", counter=COUNTER, passage_tokens=80, max_file_bytes=10**6)
    assert corpus.passages == () and corpus.skipped[0].reason == "KNOWLEDGE_DIR is not a readable folder"


def settled(path: Path, seconds_ago: int = 60) -> None:
    """Give ``path`` a modification time well in the past (no longer "racy")."""
    then = time.time_ns() - seconds_ago * 1_000_000_000
    os.utime(path, ns=(then, then))


def test_the_fingerprint_changes_with_any_file_and_ignores_hidden_ones(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\ntext")
    settled(tmp_path / "a.md")
    before = fingerprint(tmp_path)
    (tmp_path / ".swap.md").write_text("x")
    assert fingerprint(tmp_path) == before
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# B\n\ntext")
    assert fingerprint(tmp_path) != before


def test_a_file_rewritten_within_its_timestamp_tick_is_read_again(tmp_path: Path) -> None:
    """Same size, same modification time, new text (two writes within one tick of a coarse clock):
    while a file is that fresh, neither the fingerprint nor the parse cache take it as unchanged."""
    path = tmp_path / "a.md"
    path.write_text("# Refunds\n\nPaid within 14 days.\n")
    stamp = time.time_ns()
    os.utime(path, ns=(stamp, stamp))
    parsed = ParsedFiles()
    first = read_corpus(tmp_path, counter=COUNTER, passage_tokens=80, max_file_bytes=10**6, parsed=parsed)
    seen = fingerprint(tmp_path)
    path.write_text("# Refunds\n\nPaid within 30 days.\n")
    os.utime(path, ns=(stamp, stamp))  # the tick did not move
    assert fingerprint(tmp_path) != seen, "the next look reads it again"
    second = read_corpus(tmp_path, counter=COUNTER, passage_tokens=80, max_file_bytes=10**6, parsed=parsed)
    assert "14 days" in first.passages[0].text and "30 days" in second.passages[0].text
    settled(path)
    assert fingerprint(tmp_path) == fingerprint(tmp_path), "settled, it is stable again"


def test_a_docbook_export_keeps_its_answers_and_drops_its_navigation_and_contents(tmp_path: Path) -> None:
    """A real help export written by others (the Debian FAQ as Debian ships it, DocBook HTML): its
    navigation bars and chapter table of contents are divs marked only by class, not <nav>."""
    source = Path(__file__).resolve().parents[4] / "benchmarks" / "corpus" / "debian-faq" / "html" / "en"
    (tmp_path / "kernel.en.html").write_bytes((source / "kernel.en.html").read_bytes())
    corpus = read_corpus(tmp_path, counter=COUNTER, passage_tokens=220, max_file_bytes=1 << 20)
    texts = [p.text for p in corpus.passages]
    assert not corpus.skipped
    assert not any("Table of Contents" in t or "Chapter 9." in t or "Chapter 11." in t for t in texts)
    assert [p.headings[-1].split(" ", 1)[0] for p in corpus.passages] == ["10.1.", "10.2.", "10.3.", "10.4.", "10.5."]
    assert any("linux-image-" in t for t in texts)  # the answer of 10.4 (how to remove an old kernel)


def test_a_refresh_parses_only_the_files_that_changed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_pdf(tmp_path / "manual.pdf")
    (tmp_path / "faq.md").write_text(MARKDOWN)
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 nothing")
    for path in tmp_path.iterdir():
        settled(path, 120)
    parsed = ParsedFiles()
    first = read_corpus(tmp_path, counter=COUNTER, passage_tokens=120, max_file_bytes=1 << 20, parsed=parsed)
    assert parsed.parses == 3 and len(first.skipped) == 1
    caplog.clear()
    (tmp_path / "faq.md").write_text(MARKDOWN.replace("14 days", "30 days"))
    settled(tmp_path / "faq.md")
    second = read_corpus(tmp_path, counter=COUNTER, passage_tokens=120, max_file_bytes=1 << 20, parsed=parsed)
    assert parsed.parses == 4, "only the edited file was parsed again"
    assert any("30 days" in p.text for p in second.passages) and not any("14 days" in p.text for p in second.passages)
    assert [p for p in second.passages if p.document == "manual.pdf"] == [
        p for p in first.passages if p.document == "manual.pdf"
    ]
    assert second.skipped == first.skipped and "broken.pdf" not in caplog.text, "a known skip is not logged again"
    (tmp_path / "manual.pdf").unlink()
    write_pdf(tmp_path / "manual.pdf")  # back, with a new time: parsed again
    settled(tmp_path / "manual.pdf", 30)
    read_corpus(tmp_path, counter=COUNTER, passage_tokens=120, max_file_bytes=1 << 20, parsed=parsed)
    assert parsed.parses == 5
