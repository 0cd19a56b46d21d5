"""A file a customer sends (PDF, text, Markdown, HTML) as text for the prompt, cut to a token cap.

The knowledge parsers read it (the same refusals: broken, encrypted, a PDF bomb, binary, not UTF-8),
their refusal kinds become MediaError reasons; the sections come out as heading-path lines and text.
The cut keeps whole lines where it can. The name is made safe for a prompt (no control or bidi
characters, at most 80 characters). Pure and synchronous (pypdf is CPU-bound): run it in a thread.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

from services.engine.tokens import TokenCounter
from services.errors import MediaError
from services.knowledge.documents import SUFFIXES, Document, UnreadableDocument, decode_text, parse_text, squash
from services.knowledge.html_doc import parse_html
from services.knowledge.markdown_doc import parse_markdown
from services.knowledge.pdf_doc import parse_pdf
from services.media import reasons

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

_REASONS: Final = {
    "encrypted": reasons.ENCRYPTED,
    "empty": reasons.EMPTY,
    "unsupported": reasons.UNSUPPORTED,
    "too_big": reasons.TOO_BIG,
}
"""UnreadableDocument.kind → MediaError.reason; any other kind is UNREADABLE."""


@dataclass(frozen=True, slots=True)
class DocumentText:
    name: str
    """The file name as sent, safe for a prompt (printable, at most 80 characters)."""
    text: str
    """The extracted text, cut to the token cap (at a line break where possible)."""
    tokens: int
    """Tokens of ``text`` (TokenCounter.count_text)."""
    truncated: bool
    """Only the first part is in ``text`` (over the token cap, or over the PDF page cap)."""
    pages: int | None
    """A PDF's page count; None for the other types."""


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


def _parse(data: bytes, kind: str, *, max_pdf_pages: int) -> Document:
    path, title = "customer document", "document"
    if kind == "pdf":
        return parse_pdf(data, path=path, fallback_title=title, max_pages=max_pdf_pages)
    text = decode_text(data)
    if kind == "markdown":
        return parse_markdown(text, path=path, fallback_title=title)
    if kind == "html":
        return parse_html(text, path=path, fallback_title=title)
    return parse_text(text, path=path, fallback_title=title)


def _lines(text: str) -> list[str]:
    """A section's lines, whitespace squashed; a fenced code block keeps its indentation."""
    if text.lstrip().startswith(("```", "~~~")):
        return [line.rstrip() for line in text.splitlines() if line.strip()]
    return [line for line in (squash(line) for line in text.splitlines()) if line]


def render(document: Document) -> str:
    """The sections as text a model reads: a heading-path line ("Returns › Refunds") whenever the
    path changes, a blank line before it, then the sections' lines."""
    blocks: list[list[str]] = []
    current: tuple[str, ...] | None = None
    for section in document.sections:
        lines = _lines(section.text)
        if not lines:
            continue
        headings = tuple(h for h in (squash(h) for h in section.headings) if h)
        if headings != current or not blocks:
            blocks.append([" › ".join(headings)] if headings else [])
            current = headings
        blocks[-1].extend(lines)
    return "\n\n".join("\n".join(block) for block in blocks if block)


def cut_to_tokens(text: str, max_tokens: int, counter: TokenCounter) -> tuple[str, int, bool]:
    """``text`` within ``max_tokens``: (text, its tokens, whether it was cut). Cut on a token boundary,
    then back to the last blank line, else line break, else space lying in the final 20 % of it."""
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, not {max_tokens}")
    tokens = counter.encode(text)
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


def read_customer_document(
    data: bytes,
    *,
    file_name: str,
    mime_type: str | None,
    max_tokens: int,
    counter: TokenCounter,
    max_pdf_pages: int = 200,
) -> DocumentText:
    """The text of a customer's file within ``max_tokens``; MediaError(kind="document") when it is of
    a type not read (UNSUPPORTED), encrypted (ENCRYPTED), without text (EMPTY) or unreadable."""
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
        document = _parse(data, kind, max_pdf_pages=max_pdf_pages)
    except UnreadableDocument as exc:
        reason = _REASONS.get(exc.kind, reasons.UNREADABLE)
        raise MediaError(f"document {name!r} not read: {exc}", kind="document", reason=reason) from exc
    full = render(document)
    if not full.strip():
        raise MediaError(f"document {name!r} has no text", kind="document", reason=reasons.EMPTY)
    text, tokens, cut = cut_to_tokens(full, max_tokens, counter)
    over_pages = document.pages is not None and document.pages > max_pdf_pages
    return DocumentText(name=name, text=text, tokens=tokens, truncated=cut or over_pages, pages=document.pages)
