"""The embedding cache contract: vectors by model + passage id (a content hash), shared by every worker
(Redis) or kept on disk (the in-process mode), so each passage is embedded once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class EmbeddingCache(Protocol):
    async def get_many(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
        """The cached vectors (float32 bytes) of ``ids`` that exist."""
        ...

    async def put_many(self, model: str, vectors: Mapping[str, bytes]) -> None: ...

    async def claim(self, model: str, ids: Sequence[str], *, ttl_seconds: float) -> set[str]:
        """The ids this caller should embed now: not claimed by another worker in the last
        ``ttl_seconds`` (the others are being embedded elsewhere and will appear in the cache)."""
        ...

    async def release(self, model: str, ids: Sequence[str]) -> None:
        """Drop this caller's claims on ``ids`` (embedded, or given up: another worker may take them now)."""
        ...
