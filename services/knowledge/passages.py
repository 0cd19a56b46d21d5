"""A document's sections cut into passages of at most KNOWLEDGE_PASSAGE_TOKENS: small sections under
one heading path merged, a long one split at sentence (then word) boundaries; ids are content hashes."""

from __future__ import annotations

import hashlib
import re

from services.core.knowledge import Passage
from services.core.tokens import TokenCounter
from services.knowledge.documents import Document, Section

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


def passage_id(document: str, headings: tuple[str, ...], text: str) -> str:
    digest = hashlib.sha256("\x1f".join((document, *headings, "", text)).encode("utf-8", "replace"))
    return digest.hexdigest()[:16]


def _words(sentence: str, *, counter: TokenCounter, max_tokens: int) -> list[str]:
    """A sentence over the limit in runs of whole words of at most ``max_tokens`` (a lone word may
    still be longer: ``_by_tokens`` cuts it)."""
    units: list[str] = []
    current: list[str] = []
    for word in sentence.split():
        trial = " ".join((*current, word))
        if current and counter.count_text(trial) > max_tokens:
            units.append(" ".join(current))
            current = [word]
        else:
            current.append(word)
    if current:
        units.append(" ".join(current))
    return units


def _units(text: str, *, counter: TokenCounter, max_tokens: int) -> list[str]:
    """``text``'s sentences, each one over the limit split into runs of words."""
    units: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if counter.count_text(sentence) <= max_tokens:
            units.append(sentence)
        else:
            units.extend(_words(sentence, counter=counter, max_tokens=max_tokens))
    return units


def _packed(units: list[str], *, counter: TokenCounter, max_tokens: int) -> list[str]:
    """Consecutive units joined by a space while the join fits in ``max_tokens``."""
    pieces: list[str] = []
    current_text = ""
    for unit in units:
        trial = f"{current_text} {unit}".strip()
        if current_text and counter.count_text(trial) > max_tokens:
            pieces.append(current_text)
            current_text = unit
        else:
            current_text = trial
    if current_text:
        pieces.append(current_text)
    return pieces


def _by_tokens(pieces: list[str], *, counter: TokenCounter, max_tokens: int) -> list[str]:
    """A single word over the limit (a pasted token string) cut by tokens; the rest as they are."""
    out: list[str] = []
    for piece in pieces:
        tokens = counter.encode(piece)
        if len(tokens) <= max_tokens:
            out.append(piece)
            continue
        for start in range(0, len(tokens), max_tokens):
            out.append(counter.decode(tokens[start : start + max_tokens]))
    return out


def _pieces(text: str, *, counter: TokenCounter, max_tokens: int) -> list[str]:
    """``text`` in pieces of at most ``max_tokens``: whole sentences where they fit, else words."""
    if counter.count_text(text) <= max_tokens:
        return [text]
    units = _units(text, counter=counter, max_tokens=max_tokens)
    pieces = _packed(units, counter=counter, max_tokens=max_tokens)
    return _by_tokens(pieces, counter=counter, max_tokens=max_tokens)


def _merged(sections: tuple[Section, ...], *, counter: TokenCounter, max_tokens: int) -> list[Section]:
    merged: list[Section] = []
    for section in sections:
        if merged and merged[-1].headings == section.headings:
            joined = f"{merged[-1].text}\n{section.text}"
            if counter.count_text(joined) <= max_tokens:
                merged[-1] = Section(section.headings, joined)
                continue
        merged.append(section)
    return merged


def cut_passages(document: Document, *, counter: TokenCounter, max_tokens: int) -> list[Passage]:
    passages: list[Passage] = []
    seen: set[str] = set()
    for section in _merged(document.sections, counter=counter, max_tokens=max_tokens):
        for piece in _pieces(section.text, counter=counter, max_tokens=max_tokens):
            text = piece.strip()
            if not text:
                continue
            pid = passage_id(document.path, section.headings, text)
            if pid in seen:
                continue
            seen.add(pid)
            passages.append(
                Passage(
                    id=pid,
                    document=document.path,
                    title=document.title,
                    headings=section.headings,
                    text=text,
                    tokens=counter.count_text(text),
                    url=document.url,
                )
            )
    return passages
