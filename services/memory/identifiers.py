"""Deterministic extraction of identifiers (order numbers, codes, e-mails, phones, URLs) from text.

Used to guarantee that compaction never silently drops a fact the customer gave. Pure code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from services.core.records import StoredMessage
from services.core.summary_state import SummaryState

# Order matters: earlier patterns win where matches overlap (a phone number is not also "a number").
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("url", re.compile(r"\bhttps?://[^\s<>\"']+[^\s<>\"'.,;:!?)\]]")),
    # The local part starts at a run of its characters only (no rescan from inside "a.a.a.a…": that
    # was quadratic); leading ".+-" are skipped, the value is the "value" group. _EMAIL_GLUED reads
    # an address that starts where the one before ends ("a@b.com+c@d.com").
    ("email", re.compile(r"(?<![\w.+-])[.+-]*+(?P<value>\w[\w.+-]*+@[\w-]+(?:\.[\w-]+)+\b)")),
    (
        "phone",
        re.compile(r"(?<![\w+])\+\d[\d ()-]{6,}\d(?!\w)|(?<!\w)\(?\d{3}\)?[ -]\d{3}[ -]\d{2}[ -]?\d{2}(?!\w)"),
    ),
    # Digit groups joined by hyphens (tracking numbers): 7700-1234-5566
    ("number-group", re.compile(r"(?<![\w-])\d{3,}(?:-\d{2,})+(?![\w-])")),
    # Hexadecimal error codes: 0x80070005
    ("code", re.compile(r"\b0x[0-9a-fA-F]{2,}\b")),
    # Codes mixing letters and digits: ORD-7718, AB12345, E-042, SN: X7K-99, #A12
    (
        "code",
        re.compile(
            r"(?<![\w-])#?(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[^\W_][\w]*(?:-[\w]+)+(?![\w-])"
            r"|(?<![\w-])(?=\w*\d)[^\W\d_]{1,6}\d{2,}\w*(?![\w-])"
        ),
    ),
    # Numbers with 3+ digits, also with separators: 7718, 1299.50, 12.03.2026, 2.4.1
    ("number", re.compile(r"(?<![\w.,])#?\d+(?:[.,:/]\d+)*(?![\w])")),
)
_EMAIL_GLUED = re.compile(r"(?P<value>[\w.+-]++@[\w-]+(?:\.[\w-]+)+\b)")
"""Matched where an address ended (a word boundary): the next one may start there, "+" and all."""
_MIN_NUMBER_DIGITS = 3
_SPACE = re.compile(r"\s")
_TO_LAST_SPACE = re.compile(r".*\s", re.DOTALL)
_PHRASE_RADIUS = 40


@dataclass(frozen=True, slots=True)
class Identifier:
    kind: str
    value: str
    phrase: str


def _phrase_around(text: str, start: int, end: int) -> str:
    left = max(0, start - _PHRASE_RADIUS)
    right = min(len(text), end + _PHRASE_RADIUS)
    # widen to word boundaries so the phrase does not start or end mid-word (at most the radius
    # again: text without spaces must not make each identifier's phrase walk the whole text)
    floor, ceiling = max(0, left - _PHRASE_RADIUS), min(len(text), right + _PHRASE_RADIUS)
    if left > floor and not text[left - 1].isspace():
        before = _TO_LAST_SPACE.match(text, floor, left)
        left = before.end() if before else floor
    after = _SPACE.search(text, right, ceiling)
    right = after.start() if after else ceiling
    snippet = " ".join(text[left:right].split())
    return snippet


def _matches(kind: str, pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text)``; for e-mails also an address glued to the end of the one before."""
    if kind != "email":
        yield from pattern.finditer(text)
        return
    pos = 0
    while (match := pattern.search(text, pos)) is not None:
        while match is not None:
            yield match
            pos = match.end()
            match = _EMAIL_GLUED.match(text, pos)


def extract_identifiers(text: str) -> list[Identifier]:
    """Identifiers in order of appearance, each once, with the phrase around its first mention."""
    taken = bytearray(len(text))  # 1 where an earlier match lies: an overlap check per match, not per pair
    found: list[tuple[int, Identifier]] = []
    seen: set[str] = set()
    for kind, pattern in _PATTERNS:
        for match in _matches(kind, pattern, text):
            start, end = match.span("value" if "value" in pattern.groupindex else 0)
            if taken.find(1, start, end) >= 0:
                continue
            value = text[start:end]
            if kind == "number" and sum(ch.isdigit() for ch in value) < _MIN_NUMBER_DIGITS:
                continue
            taken[start:end] = b"\x01" * (end - start)
            key = value.casefold()
            if key in seen:
                continue
            seen.add(key)
            found.append((start, Identifier(kind, value, _phrase_around(text, start, end))))
    found.sort(key=lambda pair: pair[0])
    return [identifier for _, identifier in found]


def mentions(text: str, value: str) -> bool:
    """Whether ``value`` appears in ``text`` as a whole token (7718 is not mentioned by 77180)."""
    core = _fold(value.lstrip("#"))
    if not core:
        return False
    folded = _fold(text)
    at = folded.find(core)
    while at >= 0:  # str.find, not a pattern built from the value: no backtracking, nothing compiled per call
        end = at + len(core)
        if not (at > 0 and _is_word(folded[at - 1])) and not (end < len(folded) and _is_word(folded[end])):
            return True
        at = folded.find(core, at + 1)
    return False


def _fold(text: str) -> str:
    """Lower case, one character for one (so positions and word boundaries stay where they were)."""
    folded = text.lower()
    if len(folded) == len(text):
        return folded
    return "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)


def _is_word(ch: str) -> bool:
    """What ``\\w`` matches."""
    return ch.isalnum() or ch == "_"


def summary_text(summary: SummaryState) -> str:
    return "\n".join(
        [
            summary.topic,
            summary.next_step,
            *summary.key_facts,
            *summary.actions_taken,
            *summary.decisions,
            *summary.pending_questions,
        ]
    )


def restore_identifiers(
    summary: SummaryState, *, messages: Iterable[StoredMessage] = (), previous: SummaryState | None = None
) -> tuple[SummaryState, list[Identifier]]:
    """Add back to ``key_facts`` every identifier of the folded messages (and of the previous summary)
    that the new summary lost, with its surrounding phrase. Returns the summary and what was restored."""
    text = summary_text(summary)
    restored: list[Identifier] = []
    facts = list(summary.key_facts)
    sources: list[tuple[str, str]] = [(m.role, m.content) for m in messages]
    if previous is not None:
        sources.insert(0, ("summary", summary_text(previous)))
    for role, content in sources:
        for identifier in extract_identifiers(content):
            if mentions(text, identifier.value):
                continue
            who = {"user": "customer", "assistant": "support"}.get(role, "earlier summary")
            fact = f'{identifier.value} ({who}: "{identifier.phrase}")'
            facts.append(fact)
            text += "\n" + fact
            restored.append(identifier)
    if not restored:
        return summary, []
    return summary.model_copy(update={"key_facts": facts}), restored
