"""A file of KNOWLEDGE_DIR read into a Document, by its suffix, or refused with the reason.

Every way a file can be unusable (too big, empty, binary, not UTF-8, a broken or encrypted PDF) is an
``UnreadableDocument`` whose message is what operators see in the one log line per skipped file."""

from __future__ import annotations

from pathlib import Path

from services.knowledge.documents import SUFFIXES, Document, UnreadableDocument, decode_text, parse_text
from services.knowledge.html_doc import parse_html
from services.knowledge.markdown_doc import parse_markdown
from services.knowledge.pdf_doc import parse_pdf


def read_document(path: Path, *, relative: str, max_bytes: int) -> Document:
    """The document at ``path`` (``relative``: its name under KNOWLEDGE_DIR); UnreadableDocument otherwise."""
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise UnreadableDocument(f"unsupported type {path.suffix or '(no suffix)'}", kind="unsupported")
    size = path.stat().st_size
    if size > max_bytes:
        raise UnreadableDocument(f"{size} bytes, over KNOWLEDGE_MAX_FILE_BYTES={max_bytes}", kind="too_big")
    if size == 0:
        raise UnreadableDocument("empty")
    data = path.read_bytes()
    if kind == "pdf":
        document = parse_pdf(data, path=relative, fallback_title=path.stem)
    else:
        text = decode_text(data)
        if kind == "markdown":
            document = parse_markdown(text, path=relative, fallback_title=path.stem)
        elif kind == "html":
            document = parse_html(text, path=relative, fallback_title=path.stem)
        else:
            document = parse_text(text, path=relative, fallback_title=path.stem)
    if not any(section.text for section in document.sections):
        raise UnreadableDocument("no text found", kind="empty")
    return document
