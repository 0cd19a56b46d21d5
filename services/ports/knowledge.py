"""The knowledge contract: the live source every turn reads one immutable snapshot from, and the
unanswered-question records; its data types (passages, queries, retrievals) are in
services/core/knowledge.py."""

from __future__ import annotations

from typing import Protocol

from services.core.knowledge import KnowledgeQuery, Passage, Retrieval, SkippedFile


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
