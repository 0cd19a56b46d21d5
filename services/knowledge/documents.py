"""A document as titled sections with heading paths, the reason a file is refused, and the text
helpers every format's parser shares (plain text is parsed here; the others have their own module)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Section:
    """A block of text under its heading path (a paragraph, a list item, an FAQ question with its answer)."""

    headings: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True)
class Document:
    path: str
    title: str
    url: str | None
    sections: tuple[Section, ...]
    pages: int | None = None
    """A PDF's page count (also the pages not read); None for the other formats."""


RefusalKind = Literal["unreadable", "unsupported", "encrypted", "empty", "too_big", "too_complex"]
"""too_complex: reading it would take more work or time than a document is allowed."""


class UnreadableDocument(Exception):
    """The file cannot serve as knowledge; ``str(exc)`` is the reason, ``kind`` the same for code
    (customer documents map it to what the customer is told)."""

    def __init__(self, message: str, *, kind: RefusalKind = "unreadable") -> None:
        super().__init__(message)
        self.kind: RefusalKind = kind


SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".html": "html", ".htm": "html", ".pdf": "pdf"}

_SPACES = re.compile(r"[ \t\u00a0]+")
_INVISIBLE = re.compile("[\u00ad\u200b\u200c\u200d\u2060\ufeff]")
"""Soft hyphens, zero-width spaces and joiners of web exports: they would split "достав&shy;ка"."""
_BLANK_LINE = re.compile(r"\n\s*\n")
_UNDERLINE = re.compile(r"\s*(=+|-+)\s*")


def squash(text: str) -> str:
    """Invisible format characters dropped, whitespace inside a line collapsed, the ends trimmed."""
    return _SPACES.sub(" ", _INVISIBLE.sub("", text)).strip()


def decode_text(data: bytes) -> str:
    """UTF-8 text (a BOM is fine); anything else is refused, never guessed."""
    if b"\x00" in data:
        raise UnreadableDocument("binary file (NUL bytes)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableDocument(f"not UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise UnreadableDocument("empty", kind="empty")
    return text


def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks, lines joined, whitespace squashed."""
    blocks = _BLANK_LINE.split(text.replace("\r\n", "\n").replace("\r", "\n"))
    return [squash(" ".join(block.splitlines())) for block in blocks if block.strip()]


def parse_text(text: str, *, path: str, fallback_title: str) -> Document:
    """Plain text: paragraphs; a short line ending with ':' or underlined (=== / ---) heads what follows."""
    headings: tuple[str, ...] = ()
    sections: list[Section] = []
    for block in _BLANK_LINE.split(text.replace("\r\n", "\n").replace("\r", "\n")):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        if len(lines) >= 2 and _UNDERLINE.fullmatch(lines[1]):
            headings = (squash(lines[0]),)
            lines = lines[2:]
        elif len(lines[0]) <= 80 and lines[0].rstrip().endswith(":") and len(lines) == 1:
            headings = (squash(lines[0]).rstrip(":"),)
            continue
        body = squash(" ".join(lines))
        if body:
            sections.append(Section(headings, body))
    first = text.strip().splitlines()[0] if text.strip() else ""
    title = squash(first)[:120] if first and len(first) <= 120 else fallback_title
    return Document(path=path, title=title or fallback_title, url=None, sections=tuple(sections))
