"""Markdown: front matter (``title:``, ``url:``), ATX and setext headings as the heading path,
paragraphs and list items as sections, a question heading (ending in '?') with its answer as one."""

from __future__ import annotations

import re

from services.knowledge.documents import Document, Section, squash
from services.ports.knowledge import web_url

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


def parse_markdown(text: str, *, path: str, fallback_title: str) -> Document:
    meta, lines = _front_matter(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    stack: list[tuple[int, str]] = []
    sections: list[Section] = []
    block: list[str] = []
    fence: str | None = None
    first_heading: str | None = None

    def headings() -> tuple[str, ...]:
        return tuple(title for _, title in stack)

    def flush() -> None:
        if block:
            body = "\n".join(block) if fence is not None else _inline(" ".join(block))
            if body.strip():
                sections.append(Section(headings(), body.strip()))
            block.clear()

    def heading(level: int, title: str) -> None:
        nonlocal first_heading
        flush()
        title = _inline(title)
        first_heading = first_heading or title
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))

    for index, line in enumerate(lines):
        stripped = line.strip()
        if fence is not None:
            block.append(line)
            if stripped.startswith(fence):
                flush()
                fence = None
            continue
        if stripped.startswith(("```", "~~~")):
            flush()
            fence = stripped[:3]
            block.append(line)
            continue
        match = _ATX.match(stripped)
        if match:
            heading(len(match.group(1)), _atx_title(stripped[match.end() :]))
            continue
        nxt = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if stripped and block == [] and _SETEXT.fullmatch(nxt) and not _ITEM.match(stripped):
            heading(1 if nxt.startswith("=") else 2, stripped)
            continue
        if _SETEXT.fullmatch(stripped) and stack and stack[-1][1] == _inline(lines[index - 1].strip()):
            continue
        question = _BOLD_QUESTION.match(stripped)
        if question:
            heading(7, question.group(1))
            continue
        if not stripped:
            flush()
            continue
        if _ITEM.match(line) and block:
            flush()
        block.append(_ITEM.sub("- ", line, count=1) if _ITEM.match(line) else stripped)
    fence = None
    flush()
    title = meta.get("title") or first_heading or fallback_title
    return Document(path=path, title=title, url=web_url(meta.get("url")), sections=tuple(sections))
