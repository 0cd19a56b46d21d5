"""The knowledge contract: the live source every turn reads one immutable snapshot from, and the
unanswered-question records and the learned FAQ; its data types (passages, queries, retrievals) are in
services/core/knowledge.py."""

from __future__ import annotations

from typing import Protocol

from services.core.knowledge import DigestPost, FaqEntry, KnowledgeQuery, Passage, Retrieval, SkippedFile


class KnowledgeSnapshot(Protocol):
    """One built index, never changed after it is built: a turn uses one snapshot from start to end."""

    @property
    def version(self) -> str: ...

    @property
    def passages(self) -> tuple[Passage, ...]: ...

    @property
    def skipped(self) -> tuple[SkippedFile, ...]: ...

    async def search(self, query: KnowledgeQuery, *, limit: int, full_text: bool = False) -> Retrieval:
        """``full_text``: no query embedding (when only whether something matched is needed)."""
        ...


class KnowledgeSource(Protocol):
    """The live knowledge of KNOWLEDGE_DIR: ``current()`` is the newest complete snapshot (a rebuild
    is built aside and swapped in whole)."""

    def current(self) -> KnowledgeSnapshot: ...


class KnowledgeGaps(Protocol):
    """Questions no document answered, for operators (``python -m bot knowledge gaps``)."""

    async def record(self, chat_id: int, question: str) -> None: ...

    async def top(self, limit: int) -> list[tuple[str, int]]:
        """The most asked unanswered questions with their counts, most asked first."""
        ...

    async def forget(self, chat_id: int) -> None:
        """/forget: nothing the chat asked stays in the records."""
        ...


class LearnedFaq(Protocol):
    """FAQ entries operators wrote (searchable like a document), and the daily gaps digest's marks.
    ``revision`` grows with every change: every worker's library polls it and rebuilds aside."""

    async def add(self, questions: tuple[str, ...], answer: str, *, author: str, key: str | None = None) -> FaqEntry:
        """A new entry. ``key``: the update that asked for it; the same key again returns the entry it
        made (as first made), so a redelivered update adds nothing."""
        ...

    async def edit(self, entry_id: str, questions: tuple[str, ...], answer: str, *, author: str) -> FaqEntry | None:
        """A new version of the entry (None: no such entry)."""
        ...

    async def remove(self, entry_id: str) -> bool:
        """The entry leaves the knowledge (its versions are kept); False: no such entry."""
        ...

    async def entries(self) -> list[FaqEntry]:
        """Every entry not removed, as its newest version, oldest entry first."""
        ...

    async def history(self, entry_id: str) -> list[FaqEntry]:
        """Every version of the entry, oldest first (a removed entry's too)."""
        ...

    async def revision(self) -> int: ...

    async def claim_digest(self, day: str) -> bool:
        """True for exactly one caller per ``day`` (``YYYY-MM-DD``), across every worker."""
        ...

    async def release_digest(self, day: str) -> None:
        """The claim of ``day`` given back (nothing of the digest was posted): the next look posts it."""
        ...

    async def remember_post(self, message_id: int, post: DigestPost) -> None: ...

    async def post(self, message_id: int) -> DigestPost | None:
        """The gap group posted as ``message_id`` (None: not a digest message, or forgotten)."""
        ...
