"""A file a customer sends (PDF, text, Markdown, HTML) as text for the prompt, cut to a token cap.

The knowledge parsers read it in the extraction sandbox (``services.knowledge.sandbox``: killed at
DOCUMENT_TIMEOUT_SECONDS, memory capped, at most MAX_EXTRACTIONS at once), with the same refusals,
which become MediaError reasons. A text file is parsed no further than a prefix holding more than
the cap keeps; the cut tokenises growing prefixes, never the whole text, and keeps whole lines
where it can. The name is made safe for a prompt. Blocking (it waits on the child without the
GIL): run it in a thread."""

from __future__ import annotations

import threading
import unicodedata
from pathlib import PurePosixPath
from typing import Any, Final

from services.core import media_reasons as reasons
from services.core.errors import MediaError
from services.core.tokens import TokenCounter
from services.core.turn_media import DocumentText
from services.knowledge.documents import SUFFIXES, UnreadableDocument
from services.knowledge.extraction import Job, render, utf8_prefix
from services.knowledge.sandbox import Sandbox

__all__ = ["DocumentText", "cut_to_tokens", "document_type", "read_customer_document", "render", "safe_name"]

MIME_TYPES: Final = {
    "application/pdf": "pdf",
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
    "application/xhtml+xml": "html",
}
"""The document types read when the file name's suffix says nothing the bot knows."""

MAX_NAME_CHARS: Final = 80
LINE_CUT_SHARE: Final = 0.2
"""A cut moves back to the last line break when one lies within this share of the kept text's end."""
TIMEOUT_SECONDS: Final = 30.0
"""DOCUMENT_TIMEOUT_SECONDS' default: longest a document's extraction may take."""
MAX_EXTRACTIONS: Final = 2
"""Documents extracted at once in a process (each in its own child); the others wait their turn."""
MAX_CONTENT: Final = 8_000_000
"""Bytes of PDF content streams one customer document's text extraction may interpret (forms counted
each time they are drawn; 200 text pages hold a few MB)."""
SOURCE_BYTES_PER_TOKEN: Final = 256
MIN_SOURCE_BYTES: Final = 1 << 20
"""A text file is parsed no further than max(MIN_SOURCE_BYTES, SOURCE_BYTES_PER_TOKEN × the token cap)
bytes: Markdown or HTML markup around a token cap's worth of text; the rest is not read."""
RENDER_CHARS_PER_TOKEN: Final = 32
"""The rendered text comes back from the sandbox at most this many characters a token of the cap (a
token is ~4 characters of prose): a text past it is cut there, and the customer told so."""
_SLOTS = threading.BoundedSemaphore(MAX_EXTRACTIONS)

_REASONS: Final = {
    "encrypted": reasons.ENCRYPTED,
    "empty": reasons.EMPTY,
    "unsupported": reasons.UNSUPPORTED,
    "too_big": reasons.TOO_BIG,
    "too_complex": reasons.TOO_COMPLEX,
}
"""UnreadableDocument.kind → MediaError.reason; any other kind is UNREADABLE."""


def safe_name(file_name: str, *, max_chars: int = MAX_NAME_CHARS) -> str:
    """``file_name`` as one printable line: lone surrogates replaced, control, format (bidi overrides,
    zero-width) and unassigned characters dropped, whitespace squashed; over ``max_chars`` the stem
    is shortened with "…" and a short suffix kept. "document" when nothing is left."""
    kept = []
    for char in file_name:
        category = unicodedata.category(char)
        if category[0] == "Z" or char in "\t\n\r\v\f":
            kept.append(" ")
        elif category == "Cs":  # a lone surrogate (a JSON escape): no prompt or message can carry it
            kept.append("\ufffd")
        elif category not in ("Cc", "Cf", "Co", "Cn"):
            kept.append(char)
    name = " ".join("".join(kept).split()) or "document"
    if len(name) <= max_chars:
        return name
    suffix = PurePosixPath(name).suffix
    if len(suffix) > 10 or " " in suffix:
        suffix = ""
    return name[: max_chars - 1 - len(suffix)].rstrip() + "…" + suffix


def document_type(file_name: str, mime_type: str | None) -> str | None:
    """pdf, text, markdown or html: by the name's suffix, else by the MIME type; None: not read."""
    kind = SUFFIXES.get(PurePosixPath(file_name.strip()).suffix.lower())
    if kind is None and mime_type:
        kind = MIME_TYPES.get(mime_type.split(";", 1)[0].strip().lower())
    return kind


def _prefix_tokens(text: str, max_tokens: int, counter: TokenCounter) -> list[int]:
    """The tokens of a prefix of ``text`` holding more than ``max_tokens``, or of the whole text when
    it holds no more. The prefix doubles from four characters a token: the text is never encoded
    past twice what the cut needs (a 19 MB file was encoded whole, at 16 s and 469 MB)."""
    size = max_tokens * 4
    while True:
        tokens = counter.encode(text[:size])
        if len(tokens) > max_tokens or size >= len(text):
            return tokens
        size *= 2


def cut_to_tokens(text: str, max_tokens: int, counter: TokenCounter) -> tuple[str, int, bool]:
    """``text`` within ``max_tokens``: (text, its tokens, whether it was cut). Cut on a token boundary,
    then back to the last blank line, else line break, else space lying in the final 20 % of it."""
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, not {max_tokens}")
    tokens = _prefix_tokens(text, max_tokens, counter)
    if len(tokens) <= max_tokens:
        return text, len(tokens), False
    keep = max_tokens
    while True:
        head = counter.decode(tokens[:keep]).rstrip("\ufffd")  # no half of a character at the cut
        for boundary in ("\n\n", "\n", " "):  # a whole block (heading and text), line, else word
            at = head.rfind(boundary)
            if at > 0 and at >= len(head) * (1 - LINE_CUT_SHARE):
                head = head[:at]
                break
        head = head.rstrip()
        count = counter.count_text(head)
        if count <= max_tokens or keep <= 1:  # re-encoding a cut may merge tokens differently
            return head, count, True
        keep -= max(1, count - max_tokens)


def _extract(data: bytes, kind: str, *, max_tokens: int, max_pdf_pages: int, timeout: float) -> dict[str, Any]:
    """The sandbox's answer for a customer's file; the text of a text file parsed from a prefix only."""
    source = data
    if kind != "pdf":
        source = utf8_prefix(data, max(MIN_SOURCE_BYTES, SOURCE_BYTES_PER_TOKEN * max_tokens))
    job = Job(
        kind,
        "customer document",
        "document",
        max_pages=max_pdf_pages,
        max_content=MAX_CONTENT,
        render_chars=RENDER_CHARS_PER_TOKEN * max_tokens,
    )
    with _SLOTS, Sandbox() as sandbox:
        answer = sandbox.extract(job, source, timeout=timeout)
    answer.setdefault("source_cut", len(source) < len(data))
    return answer


def read_customer_document(
    data: bytes,
    *,
    file_name: str,
    mime_type: str | None,
    max_tokens: int,
    counter: TokenCounter,
    max_pdf_pages: int = 200,
    timeout: float = TIMEOUT_SECONDS,
) -> DocumentText:
    """The text of a customer's file within ``max_tokens``; MediaError(kind="document") when it is of
    a type not read (UNSUPPORTED), encrypted (ENCRYPTED), without text (EMPTY), too costly to read
    within its budget of work, ``timeout`` seconds and memory (TOO_COMPLEX) or unreadable."""
    name = safe_name(file_name)
    kind = document_type(file_name, mime_type)
    if kind is None:
        raise MediaError(
            f"document {name!r} ({mime_type or 'no MIME type'}) is of a type not read",
            kind="document",
            reason=reasons.UNSUPPORTED,
        )
    if not data:
        raise MediaError(f"document {name!r} is empty (0 bytes)", kind="document", reason=reasons.UNREADABLE)
    try:
        answer = _extract(data, kind, max_tokens=max_tokens, max_pdf_pages=max_pdf_pages, timeout=timeout)
    except UnreadableDocument as exc:  # the sandbox's own refusals: its deadline, its child's death
        answer = {"refused": str(exc), "kind": exc.kind}
    if "refused" in answer:
        reason = _REASONS.get(answer["kind"], reasons.UNREADABLE)
        raise MediaError(f"document {name!r} not read: {answer['refused']}", kind="document", reason=reason)
    full, pages = answer["text"], answer["pages"]
    if not full.strip():
        raise MediaError(f"document {name!r} has no text", kind="document", reason=reasons.EMPTY)
    text, tokens, cut = cut_to_tokens(full, max_tokens, counter)
    over_pages = pages is not None and pages > max_pdf_pages
    truncated = cut or over_pages or answer["cut"] or answer["source_cut"]
    return DocumentText(name=name, text=text, tokens=tokens, truncated=truncated, pages=pages)
