"""The live knowledge of KNOWLEDGE_DIR: the first (full-text) build at start-up, then a look every
KNOWLEDGE_REFRESH_SECONDS; a changed folder, or passages still without vectors, are rebuilt aside (the
reading and indexing in a thread) and swapped in whole, so a turn never sees a half-built index. A
failed rebuild, or a folder gone (deleted, unmounted: left empty, not a folder), keeps the last good
one, told by one WARNING line per fault, not per look. With ``learned`` (the operators' FAQ entries)
each look also polls their revision; a change is indexed with the folder's passages the same way."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Protocol

from services.core.errors import SupportBotError
from services.core.knowledge import Passage
from services.core.tokens import TokenCounter
from services.knowledge.corpus import Corpus, DocumentInfo, ParsedFiles, fingerprint, read_corpus
from services.knowledge.embedder import Embedder
from services.knowledge.learned import entry_passages
from services.knowledge.progress import IndexProgress, ProgressLog, ProgressSink
from services.knowledge.snapshot import IndexSnapshot
from services.ports.knowledge import LearnedFaq

log = logging.getLogger(__name__)

EMBED_PROGRESS_PASSAGES = 256
"""Passages embedded between two progress events (several of the embedder's batches)."""


class CorpusReader(Protocol):
    """How the folder is read into passages (``read_corpus``; a test injects a failing one)."""

    def __call__(
        self,
        root: Path,
        *,
        counter: TokenCounter,
        passage_tokens: int,
        max_file_bytes: int,
        parsed: ParsedFiles | None = None,
        progress: ProgressSink = ...,
    ) -> Corpus: ...


def folder_fault(root: Path, *, had_documents: bool) -> str | None:
    """Why ``root`` cannot be the knowledge now (gone, not a folder, unlistable, or left empty after
    holding documents: an unmounted mount point looks so), or None."""
    try:
        if not root.is_dir():
            return "KNOWLEDGE_DIR is gone or not a folder"
        with os.scandir(root) as entries:
            empty = next(entries, None) is None
    except OSError as exc:
        return f"KNOWLEDGE_DIR cannot be listed ({type(exc).__name__})"
    return "KNOWLEDGE_DIR is empty (unmounted?)" if empty and had_documents else None


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
        embedder: Embedder | None = None,
        min_similarity: float = 0.45,
        reader: CorpusReader = read_corpus,
        progress: ProgressSink | None = None,
        learned: LearnedFaq | None = None,
    ) -> None:
        self._learned = learned
        self._learned_revision: int | None = None
        self.learned: tuple[Passage, ...] = ()
        """The learned FAQ entries' passages in the index."""
        self._corpus: Corpus | None = None
        self._reader = reader
        self._progress: ProgressSink = progress if progress is not None else ProgressLog()
        """Told after every file read and every batch embedded (default: a log line every few seconds)."""
        self._parsed = ParsedFiles()
        self._fault: str | None = None
        """The fault the last refresh met (logged once), None while the folder reads."""
        self._embedder = embedder
        self._min_similarity = min_similarity
        self._vectors: dict[str, bytes] = {}
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

    def _read(self) -> Corpus:
        return self._reader(
            self.root,
            counter=self._counter,
            passage_tokens=self._passage_tokens,
            max_file_bytes=self._max_file_bytes,
            parsed=self._parsed,
            progress=self._progress,
        )

    def _index(self, corpus: Corpus, learned: tuple[Passage, ...] | None = None) -> IndexSnapshot:
        return IndexSnapshot.build(
            passages=(*corpus.passages, *(self.learned if learned is None else learned)),
            skipped=corpus.skipped,
            min_score=self._min_score,
            documents=len(corpus.documents),
            vectors=self._vectors,
            embedder=self._embedder,
            min_similarity=self._min_similarity,
        )

    def _build(self) -> tuple[Corpus, IndexSnapshot]:
        corpus = self._read()
        return corpus, self._index(corpus)

    async def _embed(self, passages: tuple[Passage, ...]) -> bool:
        """Vectors for the passages that have none yet (from the cache, else embedded); True if any
        came. A failure leaves them out, retried at the next look."""
        if self._embedder is None:
            return False
        known = {p.id for p in passages}
        self._vectors = {pid: vector for pid, vector in self._vectors.items() if pid in known}
        missing = [p for p in passages if p.id not in self._vectors]
        if not missing:
            return False
        found = 0
        step = EMBED_PROGRESS_PASSAGES
        for start in range(0, len(missing), step):
            chunk = missing[start : start + step]
            try:
                vectors = await self._embedder.embed_passages(chunk)
            except Exception:  # the cache unreachable: the index is built full-text only, retried next time
                log.exception("knowledge: embedding the passages failed; full-text only until the next refresh")
                break
            self._vectors.update(vectors)
            found += len(vectors)
            self._progress(IndexProgress("embedding", start + len(chunk), len(missing), len(passages)))
            if len(vectors) < len(chunk):  # a batch failed (logged): the rest waits for the next refresh
                break
        return found > 0

    @property
    def needs_vectors(self) -> bool:
        return self._embedder is not None and self._snapshot.embedded < len(self._snapshot.passages)

    def _fault_now(self) -> str | None:
        return folder_fault(self.root, had_documents=bool(self.documents))

    def _keep(self, fault: str, *, kind: str | None = None) -> bool:
        """The last good index stays; a fault is logged when it starts (or its ``kind`` changes), not
        on every look."""
        kind = kind or fault
        if kind != self._fault:
            log.warning(
                "knowledge: %s: %s; the previous index %s (%d passages) stays in use",
                self.root,
                fault,
                self._snapshot.version,
                len(self._snapshot.passages),
            )
            self._fault = kind
        return False

    def _cleared(self) -> None:
        if self._fault is not None:
            log.info("knowledge: %s reads again (was: %s)", self.root, self._fault)
            self._fault = None

    async def _learned_now(self) -> tuple[int, tuple[Passage, ...]] | None:
        """The learned entries' revision and passages when the revision changed since the index in
        use (None: unchanged, or unreadable now: the passages in use stay, logged)."""
        if self._learned is None:
            return None
        try:
            revision = await self._learned.revision()
            if revision == self._learned_revision:
                return None
            entries = await self._learned.entries()
        except SupportBotError as exc:
            log.warning("knowledge: the learned FAQ entries are unavailable (%s); the ones in use stay", exc)
            return None
        cut = [entry_passages(e, counter=self._counter, max_tokens=self._passage_tokens) for e in entries]
        return revision, tuple(p for passages in cut for p in passages)

    async def _corpus_now(self, seen: str) -> Corpus:
        if seen == self._fingerprint and self._corpus is not None:
            return self._corpus  # only the learned entries or the vectors changed
        return await asyncio.to_thread(self._read)

    async def refresh(self) -> bool:
        """Rebuild if any file (or a learned FAQ entry) changed since the last build; True if a new
        snapshot was swapped in. The new full-text index is swapped in first (a new file reaches turns
        without waiting for /embeddings), then again with the new passages' vectors."""
        started = time.perf_counter()
        try:
            fault = await asyncio.to_thread(self._fault_now)
            if fault is not None:
                return await self._learned_only(fault, await self._learned_now())
            seen = await asyncio.to_thread(fingerprint, self.root)
            learned = await self._learned_now()
            if seen == self._fingerprint and learned is None and not self.needs_vectors:
                self._cleared()  # the same files back (a remount): the index in use is theirs
                return False
            corpus = await self._corpus_now(seen)
            fault = await asyncio.to_thread(self._fault_now)  # gone while it was read: what was read is not it
            if fault is not None:
                return await self._learned_only(fault, learned)
            passages = self.learned if learned is None else learned[1]
            snapshot = await asyncio.to_thread(self._index, corpus, passages)
        except Exception as exc:  # a rebuild must never take the last good knowledge away
            log.debug("knowledge: the failed rebuild", exc_info=True)
            failure = f"rebuilding failed ({type(exc).__name__}: {exc})"[:300]
            return self._keep(failure, kind=f"rebuilding failed ({type(exc).__name__})")
        self._cleared()
        # the fingerprint from before the read: a file changed while reading is read again next time
        self._snapshot, self.documents, self._fingerprint, self._corpus = snapshot, corpus.documents, seen, corpus
        if learned is not None:
            self._learned_revision, self.learned = learned
        await self._add_vectors(corpus)
        log.info(
            "knowledge: index %s: %d documents, %d passages (%d of learned FAQ entries), %d files skipped (%.2f s)",
            self._snapshot.version,
            len(corpus.documents),
            len(self._snapshot.passages),
            len(self.learned),
            len(corpus.skipped),
            time.perf_counter() - started,
        )
        return True

    async def _learned_only(self, fault: str, learned: tuple[int, tuple[Passage, ...]] | None) -> bool:
        """The folder at fault: its last good corpus stays, but a changed learned FAQ (an entry added,
        edited or removed) is still indexed with it; True if that swapped in a new snapshot."""
        self._keep(fault)
        if learned is None or self._corpus is None:
            return False
        self._snapshot = await asyncio.to_thread(self._index, self._corpus, learned[1])
        self._learned_revision, self.learned = learned
        await self._add_vectors(self._corpus)
        log.info("knowledge: index %s: the learned FAQ changed (%d passages)", self._snapshot.version, len(learned[1]))
        return True

    async def _add_vectors(self, corpus: Corpus) -> None:
        if await self._embed((*corpus.passages, *self.learned)):
            try:
                self._snapshot = await asyncio.to_thread(self._index, corpus)
            except Exception:  # the full-text index just swapped in stays
                log.exception("knowledge: indexing the new vectors failed; full text only until the next refresh")

    def load(self) -> None:
        """The first build, before the bot serves (blocking: start-up waits for its knowledge)."""
        seen = fingerprint(self.root)
        corpus, snapshot = self._build()
        self._snapshot, self.documents, self._fingerprint, self._corpus = snapshot, corpus.documents, seen, corpus
        if not self.root.is_dir():  # read_corpus logged it: the refresh does not log it again
            self._fault = folder_fault(self.root, had_documents=False)
        log.info(
            "knowledge: index %s from %s: %d documents, %d passages, %d files skipped",
            snapshot.version,
            self.root,
            len(corpus.documents),
            len(snapshot.passages),
            len(corpus.skipped),
        )

    async def run(self) -> None:
        """Refresh every ``refresh_seconds`` until cancelled; with embeddings the first refresh (at
        once) adds the vectors to the full-text index ``load`` built, and the learned FAQ entries."""
        if self.needs_vectors or self._learned is not None:
            await self.refresh()
        while True:
            await asyncio.sleep(self.refresh_seconds)
            await self.refresh()
