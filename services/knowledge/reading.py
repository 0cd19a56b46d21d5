"""A file of KNOWLEDGE_DIR read into a Document, by its suffix, or refused with the reason.

Every way a file can be unusable (too big, empty, binary, not UTF-8, a broken or encrypted PDF, too
complex to read in its budget) is an ``UnreadableDocument`` whose message is what operators see in
the one log line per skipped file. The bytes are read with a cap (a file that grows after its size
was looked at is read no further than the cap), and parsed in the extraction sandbox: a child
process killed after FILE_TIMEOUT_SECONDS, its memory capped (``sandbox.py``)."""

from __future__ import annotations

import atexit
import logging
from pathlib import Path
from typing import Final

from services.knowledge.documents import SUFFIXES, Document, UnreadableDocument
from services.knowledge.extraction import Job, document_from
from services.knowledge.pdf_doc import MAX_PAGES
from services.knowledge.sandbox import Sandbox

FILE_TIMEOUT_SECONDS: Final = 120.0
"""Longest one knowledge file may take to parse (a 400-page text PDF takes ~20 s): past it the file
is skipped with a log line and its reader killed."""

log = logging.getLogger(__name__)

_SANDBOX = Sandbox()
"""The child that parses knowledge files, one at a time, for every reader of the process (it leaves
by itself when idle and is started again when needed)."""
atexit.register(_SANDBOX.close)


def read_capped(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, never more than ``max_bytes`` + 1 read: over ``max_bytes`` is refused."""
    with path.open("rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnreadableDocument(f"over KNOWLEDGE_MAX_FILE_BYTES={max_bytes} bytes", kind="too_big")
    if not data:
        raise UnreadableDocument("empty", kind="empty")
    return data


def read_document(
    path: Path,
    *,
    relative: str,
    max_bytes: int,
    timeout: float = FILE_TIMEOUT_SECONDS,
    sandbox: Sandbox | None = None,
) -> Document:
    """The document at ``path`` (``relative``: its name under KNOWLEDGE_DIR); UnreadableDocument otherwise."""
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise UnreadableDocument(f"unsupported type {path.suffix or '(no suffix)'}", kind="unsupported")
    size = path.stat().st_size
    if size > max_bytes:
        raise UnreadableDocument(f"{size} bytes, over KNOWLEDGE_MAX_FILE_BYTES={max_bytes}", kind="too_big")
    data = read_capped(path, max_bytes)
    answer = (sandbox or _SANDBOX).extract(Job(kind, relative, path.stem), data, timeout=timeout)
    if "refused" in answer:
        raise UnreadableDocument(answer["refused"], kind=answer["kind"])
    document = document_from(answer["document"])
    if document.pages is not None and document.pages > MAX_PAGES:
        log.warning("%s: only the first %d of %d pages read", relative, MAX_PAGES, document.pages)
    if not any(section.text for section in document.sections):
        raise UnreadableDocument("no text found", kind="empty")
    return document
