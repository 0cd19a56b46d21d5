"""The live knowledge of KNOWLEDGE_DIR: the first build at start-up, then a look every
KNOWLEDGE_REFRESH_SECONDS; a changed folder is rebuilt aside (in a thread) and swapped in whole, so a
turn never sees a half-built index and a failed rebuild keeps the last good one."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from services.engine.tokens import TokenCounter
from services.knowledge.corpus import Corpus, DocumentInfo, fingerprint, read_corpus
from services.knowledge.snapshot import IndexSnapshot

log = logging.getLogger(__name__)


class KnowledgeLibrary:
    """A KnowledgeSource: ``current()`` is the newest complete snapshot."""

    def __init__(
        self,
        *,
        root: Path,
        counter: TokenCounter,
        passage_tokens: int,
        max_file_bytes: int,
        min_score: float,
        refresh_seconds: float,
    ) -> None:
        self.root = root
        self._counter = counter
        self._passage_tokens = passage_tokens
        self._max_file_bytes = max_file_bytes
        self._min_score = min_score
        self.refresh_seconds = refresh_seconds
        self._snapshot = IndexSnapshot.empty(min_score=min_score)
        self._fingerprint: str | None = None
        self.documents: tuple[DocumentInfo, ...] = ()

    def current(self) -> IndexSnapshot:
        return self._snapshot

    def _build(self) -> tuple[Corpus, IndexSnapshot]:
        corpus = read_corpus(
            self.root, counter=self._counter, passage_tokens=self._passage_tokens, max_file_bytes=self._max_file_bytes
        )
        snapshot = IndexSnapshot.build(
            passages=corpus.passages,
            skipped=corpus.skipped,
            min_score=self._min_score,
            documents=len(corpus.documents),
        )
        return corpus, snapshot

    async def refresh(self) -> bool:
        """Rebuild if any file changed since the last build; True if a new snapshot was swapped in."""
        seen = await asyncio.to_thread(fingerprint, self.root)
        if seen == self._fingerprint:
            return False
        started = time.perf_counter()
        try:
            corpus, snapshot = await asyncio.to_thread(self._build)
        except Exception:  # a rebuild must never take the last good knowledge away
            log.exception("knowledge: rebuilding %s failed; the previous index stays in use", self.root)
            return False
        # the fingerprint from before the read: a file changed while reading is read again next time
        self._snapshot, self.documents, self._fingerprint = snapshot, corpus.documents, seen
        log.info(
            "knowledge: index %s: %d documents, %d passages, %d files skipped (%.2f s)",
            snapshot.version,
            len(corpus.documents),
            len(snapshot.passages),
            len(corpus.skipped),
            time.perf_counter() - started,
        )
        return True

    def load(self) -> None:
        """The first build, before the bot serves (blocking: start-up waits for its knowledge)."""
        seen = fingerprint(self.root)
        corpus, snapshot = self._build()
        self._snapshot, self.documents, self._fingerprint = snapshot, corpus.documents, seen
        log.info(
            "knowledge: index %s from %s: %d documents, %d passages, %d files skipped",
            snapshot.version,
            self.root,
            len(corpus.documents),
            len(snapshot.passages),
            len(corpus.skipped),
        )

    async def run(self) -> None:
        """Refresh every ``refresh_seconds`` until cancelled."""
        while True:
            await asyncio.sleep(self.refresh_seconds)
            await self.refresh()
