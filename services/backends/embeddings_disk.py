"""EmbeddingCache on disk for the in-process mode (one SQLite file in KNOWLEDGE_CACHE_DIR), so a
restart embeds nothing it embedded before. One process uses it: every missing id is its to embed."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (model TEXT, id TEXT, vector BLOB, PRIMARY KEY (model, id))"


class DiskEmbeddingCache:
    def __init__(self, *, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "embeddings.sqlite"
        with sqlite3.connect(self.path) as db:
            db.execute(_SCHEMA)

    def _get(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with sqlite3.connect(self.path) as db:
            for start in range(0, len(ids), 500):
                chunk = list(ids[start : start + 500])
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    f"SELECT id, vector FROM vectors WHERE model = ? AND id IN ({marks})", [model, *chunk]
                )
                found.update((str(pid), bytes(vector)) for pid, vector in rows)
        return found

    def _put(self, model: str, vectors: Mapping[str, bytes]) -> None:
        with sqlite3.connect(self.path) as db:  # one transaction: all written or none
            db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", [(model, pid, v) for pid, v in vectors.items()]
            )

    async def get_many(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
        return await asyncio.to_thread(self._get, model, ids) if ids else {}

    async def put_many(self, model: str, vectors: Mapping[str, bytes]) -> None:
        if vectors:
            await asyncio.to_thread(self._put, model, vectors)

    async def claim(self, model: str, ids: Sequence[str], *, ttl_seconds: float) -> set[str]:
        return set(ids)

    async def release(self, model: str, ids: Sequence[str]) -> None:
        return None  # one process: nobody else claims
