"""Files that used to crash, hang or silently empty the reader: a symlink loop, HTML chrome with
unclosed items, a line of brackets, a PDF that inflates; and a refresh that parses only what changed.
The time limits are hang guards, far above what the inputs take now."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

from services.core.tokens import TokenCounter
from services.knowledge.corpus import Corpus, read_corpus
from services.knowledge.html_doc import parse_html
from services.knowledge.library import KnowledgeLibrary
from services.knowledge.markdown_doc import parse_markdown


def library(root: Path, counter: TokenCounter) -> KnowledgeLibrary:
    return KnowledgeLibrary(
        root=root,
        counter=counter,
        passage_tokens=220,
        max_file_bytes=20 * 1024 * 1024,
        min_score=0.15,
        refresh_seconds=15,
    )


def test_a_symlink_loop_in_the_folder_does_not_stop_the_bot_starting(tmp_path: Path, counter: TokenCounter) -> None:
    (tmp_path / "returns.md").write_text("# Refunds\n\nRefunds are paid to the original card within 14 days.\n")
    os.symlink("loop.md", tmp_path / "loop.md")  # loop.md -> loop.md
    knowledge = library(tmp_path, counter)
    knowledge.load()  # main: RuntimeError: Symlink loop from '.../loop.md' (Path.resolve on Python 3.11)
    assert len(knowledge.current().passages) == 1


async def test_a_symlink_loop_added_later_does_not_kill_the_refresh(tmp_path: Path, counter: TokenCounter) -> None:
    (tmp_path / "returns.md").write_text("# Refunds\n\nRefunds are paid to the original card within 14 days.\n")
    knowledge = library(tmp_path, counter)
    knowledge.load()
    os.symlink("b.md", tmp_path / "a.md")
    os.symlink("a.md", tmp_path / "b.md")
    (tmp_path / "delivery.md").write_text("# Delivery\n\nStandard delivery takes 3-5 working days.\n")
    assert await knowledge.refresh() is True  # main: RuntimeError escapes refresh(); run() dies every second
    assert len(knowledge.current().passages) == 2


def test_html_chrome_with_unclosed_items_does_not_swallow_the_page() -> None:
    # <li> and <option> without end tags are valid HTML and what most CMS exports contain
    page = (
        "<html><body><nav><ul><li>Home<li>Shop</ul></nav>"
        "<h1>Refunds</h1><p>Refunds are paid to the original card within 14 days.</p></body></html>"
    )
    document = parse_html(page, path="returns.html", fallback_title="returns")
    assert any("14 days" in section.text for section in document.sections)  # main: () -- the page is empty


def test_html_form_with_unclosed_options_does_not_swallow_the_page() -> None:
    page = (
        "<html><body><form><select><option>English<option>Русский</select></form>"
        "<h1>Refunds</h1><p>Refunds are paid to the original card within 14 days.</p></body></html>"
    )
    document = parse_html(page, path="returns.html", fallback_title="returns")
    assert any("14 days" in section.text for section in document.sections)


async def test_a_markdown_line_of_brackets_is_read_in_linear_time() -> None:
    # 60 kB: one line with many '[' and no ']' (a pasted log, a data dump); the link regex backtracks
    # quadratically in markdown_doc._INLINE: 8 k repetitions take ~1 s, 1 MB would take hours
    text = "[x " * 20_000
    started = time.perf_counter()
    await asyncio.wait_for(asyncio.to_thread(parse_markdown, text, path="a.md", fallback_title="a"), timeout=30)
    assert time.perf_counter() - started < 5.0  # quadratic, it took 9.5 s


def flate_pdf(content: bytes) -> bytes:
    """A one-page PDF whose content stream is ``content``, Flate-compressed (written by hand: a bomb is
    what no PDF library writes on purpose)."""
    import zlib

    stream = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    pdf, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(pdf))
        pdf += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(pdf)
    pdf += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    pdf += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    return pdf + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


def test_a_small_pdf_that_inflates_is_refused_quickly() -> None:
    """A 20 kB PDF inflating to 6 MB of page text: pdf_doc.MAX_CHARS is checked only after a whole
    page is extracted, and pypdf inflates up to 75 MB per stream, so one ~250 kB file costs minutes of
    CPU at start-up and again on every rebuild (any change to any file re-reads them all)."""
    from services.knowledge.pdf_doc import parse_pdf

    pdf = flate_pdf(b"BT /F1 12 Tf 72 720 Td " + b"(Refunds are paid within 14 days. ) Tj " * 150_000 + b"ET")
    assert len(pdf) < 40_000
    started = time.perf_counter()
    with contextlib.suppress(Exception):  # refused is fine; what matters is how long it took
        parse_pdf(pdf, path="bomb.pdf", fallback_title="bomb")
    assert time.perf_counter() - started < 3.0, time.perf_counter() - started  # main: ~20 s


async def test_changing_one_small_file_does_not_reparse_every_unchanged_file(
    tmp_path: Path, counter: TokenCounter
) -> None:
    """The library keeps what it parsed: a one-line FAQ edit parses that file again, not the big export
    beside it (every rebuild used to parse the whole folder)."""
    (tmp_path / "export.txt").write_text("Words of a long export. " * 20_000)
    faq = tmp_path / "faq.md"
    faq.write_text("# Refunds\n\nRefunds are paid within 14 days.\n")
    then = time.time_ns() - 60 * 10**9  # settled files (a file this minute may still change: corpus.RACY_NS)
    for path in (faq, tmp_path / "export.txt"):
        os.utime(path, ns=(then, then))
    parses: list[int] = []

    def reader(root: Path, **options: Any) -> Corpus:
        corpus = read_corpus(root, **options)
        parses.append(options["parsed"].parses)
        return corpus

    knowledge = KnowledgeLibrary(
        root=tmp_path,
        counter=counter,
        passage_tokens=220,
        max_file_bytes=10**7,
        min_score=0.15,
        refresh_seconds=15,
        reader=reader,
    )
    knowledge.load()
    faq.write_text("# Refunds\n\nRefunds are paid within 10 days.\n")
    os.utime(faq, ns=(then + 10**9, then + 10**9))
    assert await knowledge.refresh() is True
    assert parses == [2, 3], "the edit parsed one file"
    assert any("10 days" in p.text for p in knowledge.current().passages)
