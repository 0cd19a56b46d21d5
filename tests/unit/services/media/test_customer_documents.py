"""A customer's file as text for the prompt: every type read, cut within the token cap, each refusal
the MediaError reason the customer is told, and a hostile file name made safe."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter

from services.core import media_reasons as reasons
from services.core.errors import MediaError
from services.core.tokens import TokenCounter
from services.core.turn_media import DocumentText
from services.knowledge.documents import UnreadableDocument, decode_text
from services.media.customer_documents import cut_to_tokens, read_customer_document, safe_name
from tests.unit.services.knowledge.test_knowledge_documents import HTML_EXPORT, MARKDOWN, write_pdf


def read(data: bytes, name: str, counter: TokenCounter, *, mime: str | None = None, **kw: int) -> DocumentText:
    return read_customer_document(data, file_name=name, mime_type=mime, max_tokens=kw.pop("max_tokens", 2000),
                                  counter=counter, **kw)  # fmt: skip


def refusal(data: bytes, name: str, counter: TokenCounter, *, mime: str | None = None) -> MediaError:
    with pytest.raises(MediaError) as raised:
        read(data, name, counter, mime=mime)
    assert raised.value.kind == "document"
    return raised.value


@pytest.fixture
def pdf(tmp_path: Path) -> bytes:
    write_pdf(tmp_path / "warranty.pdf")
    return (tmp_path / "warranty.pdf").read_bytes()


def blank_pdf(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def long_pdf(pages: int) -> bytes:
    document = FPDF()
    document.set_font("helvetica", size=11)
    for number in range(1, pages + 1):
        document.add_page()
        document.multi_cell(0, 6, f"Page {number}: the warranty covers repairs of the device for two years.")
    return bytes(document.output())


def test_a_pdf_is_read_with_its_headings_and_page_count(pdf: bytes, counter: TokenCounter) -> None:
    doc = read(pdf, "warranty.pdf", counter)
    assert doc.pages == 2 and not doc.truncated and doc.name == "warranty.pdf"
    assert "Warranty part 1\nEvery device carries a two-year warranty" in doc.text
    assert "Warranty part 2\n" in doc.text and "Damage caused by a fall or by water" in doc.text
    assert doc.tokens == counter.count_text(doc.text)


def test_a_pdf_over_the_page_cap_is_its_first_pages(counter: TokenCounter) -> None:
    doc = read(long_pdf(5), "manual.pdf", counter, max_pdf_pages=3)
    assert (doc.pages, doc.truncated) == (5, True)
    assert "Page 3:" in doc.text and "Page 4:" not in doc.text


def test_markdown_keeps_its_heading_path_and_list_items(counter: TokenCounter) -> None:
    doc = read(MARKDOWN.encode(), "returns.md", counter)
    assert doc.pages is None and not doc.truncated
    assert "Returns › Refunds\nRefunds are paid to the original card within 14 days" in doc.text
    assert "Returns › FAQ › Can I return a sale item?\nYes, sale items" in doc.text
    assert "- Keep the original box.\n- Print the return label" in doc.text
    assert "title:" not in doc.text  # the front matter is not text


def test_plain_text_and_its_whitespace(counter: TokenCounter) -> None:
    text = "Opening hours\n=============\n\nThe support   line is\topen 9:00-18:00 CET.\n\nCall\u00a0us any time.\n"
    doc = read(text.encode(), "notes.txt", counter)
    assert doc.text == "Opening hours\nThe support line is open 9:00-18:00 CET.\nCall us any time."
    assert doc.tokens == counter.count_text(doc.text)


def test_html_without_its_page_chrome(counter: TokenCounter) -> None:
    doc = read(HTML_EXPORT.encode(), "delivery.html", counter)
    assert "Delivery › Delivery times\nStandard delivery takes 3–5 working days" in doc.text
    assert "Do you ship to Norway?\nYes, with customs duties" in doc.text
    assert "tracking" not in doc.text and "Cookie settings" not in doc.text and "Home" not in doc.text


def test_the_type_comes_from_the_mime_type_when_the_name_says_nothing(counter: TokenCounter, pdf: bytes) -> None:
    assert read(pdf, "scan_0001", counter, mime="application/pdf").pages == 2
    markdown = read(b"# Title\n\nbody text", "README", counter, mime="text/markdown; charset=utf-8")
    assert markdown.text == "Title\nbody text"
    assert "Delivery times" in read(HTML_EXPORT.encode(), "page", counter, mime="text/html").text
    assert read(b"plain body", "server.log", counter, mime="text/plain").text == "plain body"
    by_suffix = read(b"# not a heading in text", "notes.txt", counter, mime="text/markdown")
    assert by_suffix.text == "# not a heading in text"  # the suffix wins


def test_a_file_over_the_cap_is_cut_within_it_at_a_line_break(counter: TokenCounter) -> None:
    lines = [f"## Step {n}\n\nTurn the dial to position {n} and wait for the green light." for n in range(400)]
    doc = read("\n\n".join(lines).encode(), "manual.md", counter, max_tokens=300)
    assert doc.truncated and doc.tokens <= 300 and doc.tokens == counter.count_text(doc.text)
    assert doc.tokens > 240  # the cut gives back at most the final 20 %
    assert doc.text.endswith("wait for the green light.")  # whole lines
    assert doc.text.startswith("Step 0\nTurn the dial to position 0")


def test_a_cut_never_leaves_half_a_character_and_keeps_the_cap(counter: TokenCounter) -> None:
    text = "ответ на вопрос 🙂 " * 400 + "\n" + "x" * 50
    for cap in (1, 2, 7, 50, 333):
        cut, tokens, truncated = cut_to_tokens(text, cap, counter)
        assert truncated and tokens <= cap and tokens == counter.count_text(cut)
        assert "\ufffd" not in cut
    assert cut_to_tokens("short", 5, counter) == ("short", 1, False)
    with pytest.raises(ValueError):
        cut_to_tokens("short", 0, counter)


def test_an_encrypted_pdf_is_encrypted(pdf: bytes, counter: TokenCounter) -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt("secret")
    out = io.BytesIO()
    writer.write(out)
    assert refusal(out.getvalue(), "locked.pdf", counter).reason == reasons.ENCRYPTED


def test_a_scanned_pdf_without_text_is_empty(counter: TokenCounter) -> None:
    assert refusal(blank_pdf(2), "scan.pdf", counter).reason == reasons.EMPTY


@pytest.mark.parametrize(
    "data",
    [os.urandom(4096), b"%PDF-1.4\n" + os.urandom(2048), b"not a pdf at all"],
    ids=["random", "pdf-header-then-random", "text"],
)
def test_bytes_that_are_no_pdf_are_unreadable(data: bytes, counter: TokenCounter) -> None:
    error = refusal(data, "invoice.pdf", counter)
    assert error.reason == reasons.UNREADABLE and "invoice.pdf" in str(error)


def test_a_truncated_pdf_is_unreadable(pdf: bytes, counter: TokenCounter) -> None:
    assert refusal(pdf[:300], "warranty.pdf", counter).reason == reasons.UNREADABLE


@pytest.mark.parametrize(
    ("name", "mime"),
    [
        ("contract.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
        ("contract.docx", None),
        ("photo.png", "image/png"),
        ("no-suffix", None),
        ("table.xlsx", "application/octet-stream"),
    ],
)
def test_other_types_are_unsupported(name: str, mime: str | None, counter: TokenCounter) -> None:
    assert refusal(b"PK\x03\x04" + b"\x00" * 64, name, counter, mime=mime).reason == reasons.UNSUPPORTED


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("Возврат товара".encode("cp1251"), reasons.UNREADABLE),
        (b"text\x00with a NUL", reasons.UNREADABLE),
        (b"", reasons.UNREADABLE),
        (b"  \n\t\n", reasons.EMPTY),
        (b"<html><script>only()</script></html>", reasons.EMPTY),
    ],
    ids=["cp1251", "nul", "zero-bytes", "whitespace", "html-without-text"],
)
def test_text_that_cannot_be_read(data: bytes, reason: str, counter: TokenCounter) -> None:
    name = "page.html" if data.startswith(b"<html") else "notes.txt"
    assert refusal(data, name, counter).reason == reason


def test_the_knowledge_refusals_keep_their_messages_and_gain_a_kind() -> None:
    with pytest.raises(UnreadableDocument) as raised:
        decode_text("é".encode("latin-1"))
    assert (str(raised.value), raised.value.kind) == ("not UTF-8 (byte 0)", "unreadable")
    with pytest.raises(UnreadableDocument) as raised:
        decode_text(b" \n")
    assert (str(raised.value), raised.value.kind) == ("empty", "empty")


@pytest.mark.parametrize(
    ("sent", "safe"),
    [
        ("invoice.pdf", "invoice.pdf"),
        ("in\x00voi\x1bce\n\r.pdf", "invoice .pdf"),
        ("report\u202efdp.exe", "reportfdp.exe"),  # the RTL override would show "reportexe.pdf"
        ("a\u200bb\u2066c\u2069.txt", "abc.txt"),
        ("caf\udce9.md", "caf\ufffd.md"),  # a lone surrogate (a JSON escape) cannot reach Telegram
        ("\u2028\t  ", "document"),
        ("Отчёт  за\tмарт.pdf", "Отчёт за март.pdf"),
    ],
)
def test_the_file_name_is_made_safe_for_a_prompt(sent: str, safe: str) -> None:
    assert safe_name(sent) == safe


def test_a_long_file_name_is_shortened_and_keeps_its_suffix(counter: TokenCounter) -> None:
    name = "\u202e" + "квартальный отчёт " * 20 + "\x07final.md"
    doc = read(b"# Q3\n\nRevenue grew.", name, counter)
    assert len(doc.name) == 80 and doc.name.endswith("….md") and doc.name.startswith("квартальный отчёт")
    assert doc.name.isprintable() and doc.text == "Q3\nRevenue grew."
    assert len(safe_name("x" * 300)) == 80 and safe_name("x" * 300).endswith("x…")
    error = refusal(b"data", "\u202e" + "y" * 300 + ".docx", counter)
    assert "\u202e" not in str(error) and "y" * 100 not in str(error)
