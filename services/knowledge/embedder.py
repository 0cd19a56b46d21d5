"""Embeddings through the provider's ``/embeddings`` (the same OpenAI-compatible endpoint), with the
cache in front: each passage embedded once across workers and restarts. A query embedding that fails
or is slower than EMBEDDING_TIMEOUT_SECONDS raises ``EmbeddingUnavailable``: the turn goes full-text,
and so do the turns of the next QUERY_PAUSE_SECONDS without trying (no customer waits on a dead
endpoint); then one turn tries again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np
from openai import AsyncOpenAI, OpenAIError

from services.core.knowledge import Passage
from services.ports.embeddings import EmbeddingCache

log = logging.getLogger(__name__)

CLAIM_SECONDS = 120.0
"""How long another worker's claim on a passage holds before this one embeds it itself."""
WAIT_POLL_SECONDS = 0.5
QUERY_PAUSE_SECONDS = 30.0
"""After a failed query embedding, queries go full-text this long without a request."""


class EmbeddingUnavailable(Exception):
    """The embeddings endpoint failed, timed out or answered in a wrong shape."""


class EmbeddingPaused(EmbeddingUnavailable):
    """No request made: a query embedding failed less than QUERY_PAUSE_SECONDS ago."""


def passage_text(passage: Passage) -> str:
    return f"{passage.title} › {' › '.join(passage.headings)}\n{passage.text}"


class Embedder:
    def __init__(
        self,
        *,
        client: AsyncOpenAI,
        model: str,
        cache: EmbeddingCache,
        batch_size: int = 64,
        timeout_seconds: float = 5.0,
        batch_timeout_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        on_request: Callable[[str, bool], None] | None = None,
    ) -> None:
        self._clock = clock
        self._paused_until = 0.0
        self._client = client
        self.model = model
        self._cache = cache
        self._batch_size = batch_size
        self._timeout = timeout_seconds
        self._batch_timeout = batch_timeout_seconds
        self.requests = 0
        self.failures = 0
        self.on_request: Callable[[str, bool], None] = on_request or (lambda kind, ok: None)
        """Called after every request with its kind (``passages``/``query``) and whether it worked."""

    async def _embed(self, texts: Sequence[str], *, seconds: float, kind: str = "passages") -> np.ndarray:
        self.requests += 1
        try:
            matrix = await self._request(texts, seconds=seconds)
        except EmbeddingUnavailable:
            self.failures += 1
            self.on_request(kind, False)
            raise
        self.on_request(kind, True)
        return matrix

    async def _request(self, texts: Sequence[str], *, seconds: float) -> np.ndarray:
        try:
            async with asyncio.timeout(seconds):
                response = await self._client.embeddings.create(
                    model=self.model, input=list(texts), encoding_format="float"
                )
        except (OpenAIError, TimeoutError, ValueError) as exc:
            raise EmbeddingUnavailable(f"{type(exc).__name__}: {exc}"[:300]) from None
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(texts) or [item.index for item in data] != list(range(len(texts))):
            raise EmbeddingUnavailable(f"{len(data)} vectors for {len(texts)} inputs")
        matrix = np.asarray([item.embedding for item in data], dtype=np.float32)
        if matrix.ndim != 2 or not np.isfinite(matrix).all():
            raise EmbeddingUnavailable("vectors of different sizes or not finite")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        normalized: np.ndarray = matrix / np.where(norms > 0, norms, 1.0)
        return normalized

    async def embed_query(self, text: str) -> np.ndarray:
        trial = bool(self._paused_until)
        if trial:  # a query embedding failed lately: none until the pause is over, then one at a time
            now = self._clock()
            if now < self._paused_until:
                raise EmbeddingPaused(f"paused for {self._paused_until - now:.0f} s more after a failure")
            self._paused_until = now + self._timeout
        try:
            row: np.ndarray = (await self._embed([text], seconds=self._timeout, kind="query"))[0]
        except EmbeddingUnavailable:
            self._paused_until = self._clock() + QUERY_PAUSE_SECONDS
            raise
        except BaseException:  # cancelled: no outcome; after a trial the next turn may try at once
            if trial:
                self._paused_until = self._clock()
            raise
        self._paused_until = 0.0
        return row

    async def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts`` (rows in order), in batches, not cached: an operator command's
        questions (``knowledge gaps``). Raises EmbeddingUnavailable."""
        step = self._batch_size
        rows = [await self._embed(texts[i : i + step], seconds=self._batch_timeout) for i in range(0, len(texts), step)]
        return np.vstack(rows) if rows else np.zeros((0, 1), dtype=np.float32)

    async def embed_passages(self, passages: Sequence[Passage]) -> dict[str, bytes]:
        """Vectors (float32 bytes) of every passage that gets one: from the cache, else embedded here;
        what another worker has claimed is waited for (its claim expires if it died). A failed batch
        leaves its passages without vectors (logged): they rank by full text until a later refresh."""
        by_id = {p.id: p for p in passages}
        found = await self._cache.get_many(self.model, list(by_id))
        missing = [pid for pid in by_id if pid not in found]
        give_up = time.monotonic() + CLAIM_SECONDS + 10
        while missing and time.monotonic() < give_up:
            mine = await self._cache.claim(self.model, missing, ttl_seconds=CLAIM_SECONDS)
            batch_ids = [pid for pid in missing if pid in mine]
            for start in range(0, len(batch_ids), self._batch_size):
                batch = batch_ids[start : start + self._batch_size]
                try:
                    matrix = await self._embed([passage_text(by_id[pid]) for pid in batch], seconds=self._batch_timeout)
                except EmbeddingUnavailable as exc:
                    log.warning("knowledge: %d passages not embedded (%s); they rank by full text", len(batch), exc)
                    await self._cache.release(self.model, batch_ids[start:])  # the next try need not wait
                    return found
                vectors = {pid: matrix[i].tobytes() for i, pid in enumerate(batch)}
                await self._cache.put_many(self.model, vectors)
                await self._cache.release(self.model, batch)
                found.update(vectors)
            missing = [pid for pid in missing if pid not in found]
            if missing:  # claimed by another worker: wait for its vectors
                await asyncio.sleep(WAIT_POLL_SECONDS)
                found.update(await self._cache.get_many(self.model, missing))
                missing = [pid for pid in missing if pid not in found]
        return found
