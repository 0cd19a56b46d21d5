"""PDF through pypdf: encrypted or broken files refused with the reason, pages and extracted text
capped so a PDF bomb cannot exhaust memory, line-broken hyphenation joined, paragraphs from blank lines."""

from __future__ import annotations

import io
import logging
import re

from services.knowledge.documents import Document, Section, UnreadableDocument, paragraphs, squash

MAX_PAGES = 2000
MAX_CHARS = 5_000_000
MAX_PAGE_CONTENT = 1_000_000
"""Bytes of one page's decompressed content stream: a text page holds tens of kB; more is a page the
pure-Python text extraction would chew on for minutes (a small PDF that inflates: a "PDF bomb")."""

_HYPHENATED = re.compile(r"(\w)-\n(\w)")
_LINE_STARTS_BLOCK = re.compile(r"\n(?=[A-ZА-ЯЁ0-9•\-])")

logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings per odd object would flood the log


def parse_pdf(data: bytes, *, path: str, fallback_title: str, max_pages: int = MAX_PAGES) -> Document:
    """The text of the first ``max_pages`` pages (``Document.pages``: all of them)."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise UnreadableDocument("encrypted PDF", kind="encrypted")
        pages = reader.pages
        count = len(pages)
        texts: list[str] = []
        total = 0
        for number, page in enumerate(list(pages)[:max_pages], start=1):
            contents = page.get_contents()  # inflated in C, cheap: checked before the slow extraction
            if contents is not None and len(contents.get_data()) > MAX_PAGE_CONTENT:
                raise UnreadableDocument(f"page {number} content over {MAX_PAGE_CONTENT} bytes (a PDF bomb?)")
            page_text = page.extract_text() or ""
            total += len(page_text)
            if total > MAX_CHARS:
                raise UnreadableDocument(f"PDF text over {MAX_CHARS} characters")
            texts.append(page_text)
        metadata_title = (reader.metadata.title if reader.metadata else None) or ""
    except UnreadableDocument:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise UnreadableDocument(f"broken PDF: {type(exc).__name__}: {exc}"[:200]) from None
    if count > max_pages:
        logging.getLogger(__name__).warning("%s: only the first %d of %d pages read", path, max_pages, count)
    text = "\n\n".join(texts)
    text = _HYPHENATED.sub(r"\1\2", text)
    blocks = paragraphs(_LINE_STARTS_BLOCK.sub("\n\n", text))
    if not blocks:
        raise UnreadableDocument("PDF has no extractable text (scanned images?)", kind="empty")
    sections: list[Section] = []
    heading: tuple[str, ...] = ()
    for block in blocks:
        if len(block) <= 80 and not block.endswith((".", ",", ";", ":")) and len(block.split()) <= 10:
            heading = (block,)
            continue
        sections.append(Section(heading, block))
    if not sections:
        sections = [Section((), block) for block in blocks]
    title = squash(str(metadata_title)) or (blocks[0] if len(blocks[0]) <= 120 else fallback_title)
    return Document(path=path, title=title, url=None, sections=tuple(sections), pages=count)
