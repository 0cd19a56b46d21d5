"""PDF through pypdf: encrypted or broken files refused with the reason, pages and extracted text
capped so a PDF bomb cannot exhaust memory, line-broken hyphenation joined, paragraphs from blank lines.

Only the pages read are built (``pdf_pages.iter_pages``), and the content streams text extraction
interprets are counted, every form XObject each time it is drawn (``pdf_pages.WorkBudget``): over
the budget the document is refused as too complex (``kind="too_complex"``). The time and memory
bounds are the extraction sandbox's (``services.knowledge.sandbox``)."""

from __future__ import annotations

import io
import logging
import re
from typing import TYPE_CHECKING

from services.knowledge.documents import Document, Section, UnreadableDocument, paragraphs, squash

if TYPE_CHECKING:
    from services.knowledge.pdf_pages import WorkBudget

MAX_PAGES = 2000
MAX_CHARS = 5_000_000
MAX_PAGE_CONTENT = 1_000_000
"""Bytes of content one page's text extraction may interpret (its own stream and every form it draws,
each time it draws it): a text page holds tens of kB; more is a page the pure-Python text extraction
would chew on for minutes (a small PDF that inflates: a "PDF bomb")."""
MAX_CONTENT = 48_000_000
"""Bytes of content the whole document's text extraction may interpret (a 2000-page manual of text
pages holds ~30 MB)."""

_HYPHENATED = re.compile(r"(\w)-\n(\w)")
_LINE_STARTS_BLOCK = re.compile(r"\n(?=[A-ZА-ЯЁ0-9•\-])")

logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings per odd object would flood the log


def _extract(reader: object, max_pages: int, budget: WorkBudget) -> list[str]:
    """The text of the first ``max_pages`` pages, within ``budget`` and MAX_CHARS."""
    from pypdf import PdfReader

    from services.knowledge.pdf_pages import iter_pages

    assert isinstance(reader, PdfReader)
    texts: list[str] = []
    total = 0
    for number, page in enumerate(iter_pages(reader), start=1):
        if number > max_pages:
            break
        budget.start_page(number, page)
        page_text = page.extract_text(visitor_operand_before=budget.visitor) or ""
        budget.check()
        total += len(page_text)
        if total > MAX_CHARS:
            raise UnreadableDocument(f"PDF text over {MAX_CHARS} characters", kind="too_complex")
        texts.append(page_text)
    return texts


def parse_pdf(
    data: bytes, *, path: str, fallback_title: str, max_pages: int = MAX_PAGES, max_content: int = MAX_CONTENT
) -> Document:
    """The text of the first ``max_pages`` pages (``Document.pages``: all of them, as the file
    states); ``max_content``: bytes of content streams interpreted in all (MAX_PAGE_CONTENT a page)."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    from services.knowledge.pdf_pages import WorkBudget, declared_pages  # pypdf imported when a PDF comes

    budget = WorkBudget(per_page=MAX_PAGE_CONTENT, total=max_content)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise UnreadableDocument("encrypted PDF", kind="encrypted")
        texts = _extract(reader, max_pages, budget)
        count = max(declared_pages(reader), len(texts))
        metadata_title = (reader.metadata.title if reader.metadata else None) or ""
    except UnreadableDocument:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise UnreadableDocument(f"broken PDF: {type(exc).__name__}: {exc}"[:200]) from None
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
