"""Markdown: front matter (``title:``, ``url:``), ATX and setext headings as the heading path,
paragraphs and list items as sections, a question heading (ending in '?') with its answer as one."""

from __future__ import annotations

import re

from services.core.knowledge import web_url
from services.knowledge.documents import Document, Section, squash

_ATX = re.compile(r"(#{1,6})\s+")
"""An ATX heading's opening hashes; the title is the rest less its closing hashes (``_atx_title``).
One pattern for the whole line, title and closing sequence, backtracked cubically on a line of spaces
or "#" (2 000 spaces: 13.7 s, holding the GIL): string methods strip the closing sequence instead."""
_SETEXT = re.compile(r"=+|-{3,}")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_BOLD_QUESTION = re.compile(r"^\*\*(.+\?)\*\*\s*$")
_INLINE = [
    # bounded classes that stop at the next "[" or "(": a line of 60 000 "[" is read in linear time
    (re.compile(r"!\[([^\[\]\n]{0,500})\]\([^()\n]{0,2000}\)"), r"\1"),
    (re.compile(r"\[([^\[\]\n]{1,500})\]\(([^()\n]{0,2000})\)"), r"\1 (\2)"),
    (re.compile(r"(\*\*|__)([^\n]{1,300}?)\1"), r"\2"),
    (re.compile(r"`([^`]+)`"), r"\1"),
]


def _inline(text: str) -> str:
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return squash(text)


def _atx_title(rest: str) -> str:
    """The title after the opening hashes: trailing spaces, then closing "#"s, then spaces dropped
    (the shortest title the former one-line pattern matched)."""
    return rest.rstrip().rstrip("#").rstrip()


def _front_matter(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    if not lines or lines[0].strip() != "---":
        return {}, lines
    for end in range(1, min(len(lines), 200)):
        if lines[end].strip() in ("---", "..."):
            meta: dict[str, str] = {}
            for line in lines[1:end]:
                key, sep, value = line.partition(":")
                if sep and key.strip():
                    meta[key.strip().lower()] = value.strip().strip("\"'")
            return meta, lines[end + 1 :]
    return {}, lines


class _Reader:
    """One parse's state: the heading path, the sections so far, the open block and code fence."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.stack: list[tuple[int, str]] = []
        self.sections: list[Section] = []
        self.block: list[str] = []
        self.fence: str | None = None
        self.first_heading: str | None = None

    def flush(self) -> None:
        if self.block:
            body = "\n".join(self.block) if self.fence is not None else _inline(" ".join(self.block))
            if body.strip():
                self.sections.append(Section(tuple(title for _, title in self.stack), body.strip()))
            self.block.clear()

    def heading(self, level: int, title: str) -> None:
        self.flush()
        title = _inline(title)
        self.first_heading = self.first_heading or title
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, title))

    def fenced(self, line: str, stripped: str) -> bool:
        """A line inside a code fence, or one opening it, kept verbatim; False for any other."""
        if self.fence is not None:
            self.block.append(line)
            if stripped.startswith(self.fence):
                self.flush()
                self.fence = None
            return True
        if stripped.startswith(("```", "~~~")):
            self.flush()
            self.fence = stripped[:3]
            self.block.append(line)
            return True
        return False

    def setext(self, index: int, stripped: str) -> bool:
        """A setext heading's title line (read as the heading) or its underline (skipped)."""
        nxt = self.lines[index + 1].strip() if index + 1 < len(self.lines) else ""
        if stripped and self.block == [] and _SETEXT.fullmatch(nxt) and not _ITEM.match(stripped):
            self.heading(1 if nxt.startswith("=") else 2, stripped)
            return True
        if not (_SETEXT.fullmatch(stripped) and self.stack):
            return False
        return self.stack[-1][1] == _inline(self.lines[index - 1].strip())

    def headed(self, index: int, stripped: str) -> bool:
        """An ATX, setext or bold-question heading line, read as a heading; False for any other."""
        match = _ATX.match(stripped)
        if match:
            self.heading(len(match.group(1)), _atx_title(stripped[match.end() :]))
            return True
        if self.setext(index, stripped):
            return True
        question = _BOLD_QUESTION.match(stripped)
        if question:
            self.heading(7, question.group(1))
        return question is not None

    def text(self, line: str, stripped: str) -> None:
        """A paragraph's line or a list item (which starts a block of its own); a blank line ends one."""
        if not stripped:
            self.flush()
            return
        if _ITEM.match(line) and self.block:
            self.flush()
        self.block.append(_ITEM.sub("- ", line, count=1) if _ITEM.match(line) else stripped)


def parse_markdown(text: str, *, path: str, fallback_title: str) -> Document:
    meta, lines = _front_matter(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    reader = _Reader(lines)
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not reader.fenced(line, stripped) and not reader.headed(index, stripped):
            reader.text(line, stripped)
    reader.fence = None
    reader.flush()
    title = meta.get("title") or reader.first_heading or fallback_title
    return Document(path=path, title=title, url=web_url(meta.get("url")), sections=tuple(reader.sections))
