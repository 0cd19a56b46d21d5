"""telegramify-markdown kept linear. Its backtracking pre-processing regexes are replaced by linear
ones with the same results (on 1.4.1 the spoiler one was cubic on line breaks inside ``||…||``, 20 kB:
45 s; the LaTeX ones quadratic on openers without a closer, 20 kB: 3.7 s): module globals the library
reads on each call, so replacing them keeps its output. ``too_nested`` spots what its Markdown walk
is cubic on (lists opened inside lists on one line)."""

from __future__ import annotations

import re
from collections.abc import Callable

from telegramify_markdown import converter

_LINE_BREAK = r"(?:\r\n?|\n)(?:[ \t]*>[ \t]?)*"
SPOILER_EDGES = re.compile(
    rf"((?:[ \t]*{_LINE_BREAK})*)((?:.*[^\r\n \t>])?[ \t>]*)((?:[\r\n][\r\n \t>]*)?)",
    re.DOTALL,
)
"""The original's groups (leading breaks, body, trailing breaks) without its lazy body: the trailing
group of the original is a line break followed by line breaks, blanks and quote markers only, so the
body is greedy up to its last other character, then the blanks before the next line break."""


class FirstCloser:
    """``pattern.sub(repl, text)`` for an ``OPEN(.*?)CLOSE`` pattern (DOTALL) that stops at the first
    opener without a closer after it: no later opener has one either, so the regex would only scan to
    the end again from each of them (quadratic). Matches are the pattern's own, at the same places."""

    def __init__(self, pattern: re.Pattern[str], opener: str, closer: str) -> None:
        self.pattern = pattern
        self._opener = opener
        self._closer = closer

    def sub(self, repl: Callable[[re.Match[str]], str], string: str) -> str:
        parts: list[str] = []
        pos = 0
        while True:
            start = string.find(self._opener, pos)
            if start < 0 or string.find(self._closer, start + len(self._opener)) < 0:
                break
            match = self.pattern.match(string, start)
            if match is None:  # cannot happen: an opener with a closer after it matches
                break
            parts += (string[pos:start], repl(match))
            pos = match.end()
        parts.append(string[pos:])
        return "".join(parts)


LATEX_MATH = FirstCloser(re.compile(r"\\\[(.*?)\\\]", re.DOTALL), "\\[", "\\]")
LATEX_INLINE = FirstCloser(re.compile(r"\\\((.*?)\\\)", re.DOTALL), "\\(", "\\)")

ORIGINAL_SOURCES = {
    "_SPOILER_EDGES_RE": rf"((?:[ \t]*{_LINE_BREAK})*)(.*?)((?:{_LINE_BREAK}[ \t]*)*)",
    "_LATEX_MATH_P": LATEX_MATH.pattern.pattern,
    "_LATEX_INLINE_P": LATEX_INLINE.pattern.pattern,
}
"""What each replaced pattern of the library is: one that changed upstream is left alone (and
tests/unit/project/test_regex_budget.py fails until it is looked at again)."""


def install() -> None:
    """Put the linear replacements in place of the library's patterns."""
    replacements = {"_SPOILER_EDGES_RE": SPOILER_EDGES, "_LATEX_MATH_P": LATEX_MATH, "_LATEX_INLINE_P": LATEX_INLINE}
    for name, replacement in replacements.items():
        current = getattr(converter, name, None)
        if isinstance(current, re.Pattern) and current.pattern == ORIGINAL_SOURCES[name]:
            setattr(converter, name, replacement)


MAX_NESTING = 8
"""List markers opening one line ("+ + + x", "1. 1. x") beyond which a reply is sent as plain text:
the converter's work grows with the cube of that depth (8 kB of "+ ": 3.3 s, holding the GIL)."""


def too_nested(markdown: str) -> bool:
    """Whether a line of ``markdown`` starts with more than MAX_NESTING list markers."""
    return any(_leading_markers(line) > MAX_NESTING for line in markdown.splitlines())


def _leading_markers(line: str) -> int:
    count = 0
    for token in line.split(None, MAX_NESTING + 1)[: MAX_NESTING + 1]:
        if token in ("-", "+", "*") or (token[:-1].isdigit() and token[-1:] in (".", ")")):
            count += 1
        else:
            break
    return count
