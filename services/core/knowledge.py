"""The knowledge data: passages cut from the operator's documents, the query a turn asks and what
retrieval returns (plain records; the contracts that use them are in services/ports/knowledge.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_WEB_URL = re.compile(r"https?://[^\s<>\[\]()\"'`\\]+", re.IGNORECASE)


def web_url(value: str | None) -> str | None:
    """A document's declared link when it is an absolute http(s) URL a customer may be shown; else
    None (``javascript:``, a relative canonical href, spaces or brackets that would break the reply)."""
    candidate = (value or "").strip()
    return candidate if _WEB_URL.fullmatch(candidate) else None


SOURCE_SEPARATOR = " › "
SOURCE_PART_CHARS = 80
"""A file name or heading longer than this is cut in ``source``: the block around a passage stays
small, so any passage of KNOWLEDGE_PASSAGE_TOKENS fits KNOWLEDGE_TOKEN_BUDGET whatever its headings."""
SOURCE_PARTS = 4
"""At most the file name and its three innermost headings."""


@dataclass(frozen=True, slots=True)
class Passage:
    """One passage of a document: a heading's paragraph, a list item, an FAQ question with its answer.

    ``id`` is a content hash (stable across restarts and workers; the embedding cache key);
    ``document`` the file's path relative to KNOWLEDGE_DIR ('/'-separated); ``tokens`` the o200k
    count of ``text``."""

    id: str
    document: str
    title: str
    headings: tuple[str, ...]
    text: str
    tokens: int
    url: str | None = None

    @property
    def source(self) -> str:
        """What the prompt and the customer see: ``returns.md › Refunds``."""
        name = self.document.rsplit("/", 1)[-1]
        parts = (name, *self.headings[-(SOURCE_PARTS - 1) :]) if self.headings else (name,)
        return SOURCE_SEPARATOR.join(
            p if len(p) <= SOURCE_PART_CHARS else p[: SOURCE_PART_CHARS - 1] + "…" for p in parts
        )


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file of KNOWLEDGE_DIR that was not read, and why (one log line each)."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class KnowledgeQuery:
    """What a turn searches with: the new message, the customer's recent messages (oldest first) and
    the summary's topic, so a follow-up finds the topic of the question before it."""

    message: str
    recent: tuple[str, ...] = ()
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class ScoredPassage:
    """A retrieved passage with its fused score and its rank in each ranking (None: not ranked)."""

    passage: Passage
    score: float
    fulltext_rank: int | None = None
    vector_rank: int | None = None


@dataclass(frozen=True, slots=True)
class Retrieval:
    """Passages above the relevance floor, best first. ``degraded``: the embeddings endpoint failed
    for this query and the ranking is full-text only."""

    passages: tuple[ScoredPassage, ...]
    index_version: str
    degraded: bool = False
    seconds: float = 0.0

    @property
    def matched(self) -> bool:
        return bool(self.passages)


FAQ_SOURCE = "FAQ, answered by the support team"
"""How a learned FAQ entry is cited: the source line of its passages."""


@dataclass(frozen=True, slots=True)
class FaqEntry:
    """A learned FAQ entry, as its newest version: ``id`` short and stable (shown as ``#ID``),
    ``questions`` (the first is its title), the operator's ``answer``, who wrote this version and when
    (epoch seconds); ``version`` counts from 1 (an edit is a new version, the old ones are kept)."""

    id: str
    questions: tuple[str, ...]
    answer: str
    author: str
    created: float
    version: int = 1


@dataclass(frozen=True, slots=True)
class DigestPost:
    """A gap group posted in the daily digest, by its message in the operators' group: what an
    operator's reply to that message answers."""

    questions: tuple[str, ...]
    count: int
