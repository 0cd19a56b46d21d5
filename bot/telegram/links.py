"""Every link of a reply made honest: a reply is the model's words, and a caption, a customer's file or
a document can put a link in them. A link to a host LinkPolicy allows stays a link; any other http(s)
link shows its address, ``text (URL)``, the host in punycode; ``user:password@`` is never a link and
never shown; other schemes and malformed targets are dropped, the link's text kept. Plain-text URLs
with credentials or a non-ASCII host are rewritten the same way; code is left as written. The rules
in full: docs/knowledge.md, "Links in replies"."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from urllib.parse import SplitResult, urlsplit, urlunsplit

from telegramify_markdown import MessageEntity

from bot.telegram.link_hosts import LinkPolicy, ascii_host

_WEB = ("http", "https")
_KEPT_TYPES = frozenset(
    {"bold", "italic", "underline", "strikethrough", "spoiler", "code", "pre", "blockquote", "expandable_blockquote"}
)
"""Entity types kept as they are (a ``text_link`` is checked; ``text_mention``, ``custom_emoji`` and
anything else the converter may grow are dropped)."""
_AUTHORITY = re.compile(r"[^\s/?#<>\"'()\[\]{}`\\|^]*")
_TRAILING = ".,;:!?"


@dataclass(frozen=True, slots=True)
class Verdict:
    keep: bool = False
    shown: str | None = None
    """The address to show (no credentials, the host in ASCII); None: the target is dropped."""


def _split(url: str) -> SplitResult | None:
    if "\\" in url or " " in url or not url.isprintable():
        return None  # browsers and urlsplit disagree on these: never guess which host opens
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return parts if parts.scheme.lower() in _WEB else None


def judge(url: str, policy: LinkPolicy) -> Verdict:
    """What becomes of a link to ``url``."""
    parts = _split(url)
    hostname = parts.hostname if parts is not None else None
    if parts is None or not hostname:
        return Verdict()
    try:
        port = parts.port
    except ValueError:
        return Verdict()
    host = ascii_host(hostname)
    if "@" not in parts.netloc and policy.allows(host):
        return Verdict(keep=True)
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return Verdict(shown=urlunsplit((parts.scheme.lower(), netloc, parts.path, parts.query, parts.fragment)))


def plain_url_edits(text: str, skip: Iterable[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """Edits (start, end, replacement) of the authorities of http(s) URLs in ``text`` that carry
    credentials or a non-ASCII host. One pass: each character is looked at a bounded number of times
    (the authority pattern is a single character class: no backtracking)."""
    skipped = sorted(skip)  # code and pre entities: disjoint
    starts = [start for start, _ in skipped]
    edits: list[tuple[int, int, str]] = []
    at = text.find("://")
    while at != -1:
        end = _AUTHORITY.match(text, at + 3).end()  # type: ignore[union-attr]  # * always matches
        while end > at + 3 and text[end - 1] in _TRAILING:
            end -= 1
        authority = text[at + 3 : end]
        web = text[max(0, at - 5) : at].lower().endswith(_WEB)
        if web and ("@" in authority or not authority.isascii()):
            before = bisect.bisect_right(starts, at) - 1
            if before < 0 or at >= skipped[before][1]:
                edits.append((at + 3, end, _clean_authority(authority)))
        at = text.find("://", max(end, at + 3))
    return edits


def _clean_authority(authority: str) -> str:
    hostport = authority.rpartition("@")[2]
    host, colon, port = hostport.rpartition(":") if hostport.count(":") == 1 else (hostport, "", "")
    return ascii_host(host) + (colon + port if port.isdigit() else "")


@dataclass(slots=True)
class _Span:
    entity: MessageEntity
    start: int
    end: int


def safe_entities(text: str, entities: list[MessageEntity], policy: LinkPolicy) -> tuple[str, list[MessageEntity]]:
    """``text`` and its entities (UTF-16 offsets) with every link made honest (see the module)."""
    spans = _spans(text, entities)
    code = [(s.start, s.end) for s in spans if s.entity.type in ("code", "pre")]
    text, spans = _apply(text, spans, plain_url_edits(text, code))
    edits: list[tuple[int, int, str]] = []
    kept: list[_Span] = []
    for span in spans:
        if span.entity.type != "text_link":
            if span.entity.type in _KEPT_TYPES:
                kept.append(span)
            continue
        verdict = judge(span.entity.url or "", policy)
        if verdict.keep:
            kept.append(span)
        elif verdict.shown is not None:
            label = text[span.start : span.end]
            if label.strip() in (verdict.shown, span.entity.url):
                edits.append((span.start, span.end, verdict.shown))
            else:
                edits.append((span.end, span.end, f" ({verdict.shown})"))
    text, kept = _apply(text, kept, edits)
    return text, _entities(text, kept)


def _spans(text: str, entities: list[MessageEntity]) -> list[_Span]:
    if not text or max(text) <= "\uffff":  # no astral character: UTF-16 offsets are indices
        return [_Span(e, e.offset, e.offset + e.length) for e in entities]
    index_of: dict[int, int] = {}
    units = 0
    for index, ch in enumerate(text):
        index_of[units] = index
        units += 2 if ord(ch) > 0xFFFF else 1
    index_of[units] = len(text)
    return [_Span(e, index_of.get(e.offset, len(text)), index_of.get(e.offset + e.length, len(text))) for e in entities]


class _Edits:
    """Sorted, disjoint edits (start, end, replacement) and where a position lands once they are
    applied, by binary search: a reply with thousands of shown links stays linear-ish."""

    def __init__(self, edits: list[tuple[int, int, str]]) -> None:
        self.edits = sorted(edits)
        self.ends = [end for _, end, _ in self.edits]
        self.shift = [0]
        for start, end, new in self.edits:
            self.shift.append(self.shift[-1] + len(new) - (end - start))

    def moved(self, position: int, *, is_end: bool) -> int:
        """An insertion at an entity's end stays outside it; a position inside a replaced range lands
        on the replacement's edge."""
        index = bisect.bisect_left(self.ends, position)
        while index < len(self.edits) and self.ends[index] == position:
            start, end, _ = self.edits[index]
            if start == end and is_end:
                break
            index += 1
        if index < len(self.edits):
            start, end, new = self.edits[index]
            if start < position < end:
                return start + self.shift[index] + (len(new) if is_end else 0)
        return position + self.shift[index]


def _apply(text: str, spans: list[_Span], edits: list[tuple[int, int, str]]) -> tuple[str, list[_Span]]:
    if not edits:
        return text, spans
    sorted_edits = _Edits(edits)
    pieces, last = [], 0
    for start, end, new in sorted_edits.edits:
        pieces += [text[last:start], new]
        last = end
    pieces.append(text[last:])
    moved = [
        _Span(s.entity, sorted_edits.moved(s.start, is_end=False), sorted_edits.moved(s.end, is_end=True))
        for s in spans
    ]
    return "".join(pieces), [s for s in moved if s.end > s.start]


def _entities(text: str, spans: list[_Span]) -> list[MessageEntity]:
    if not text or max(text) <= "\uffff":
        return [replace(s.entity, offset=s.start, length=s.end - s.start) for s in spans]
    offsets = [0]
    for ch in text:
        offsets.append(offsets[-1] + (2 if ord(ch) > 0xFFFF else 1))
    return [replace(s.entity, offset=offsets[s.start], length=offsets[s.end] - offsets[s.start]) for s in spans]
