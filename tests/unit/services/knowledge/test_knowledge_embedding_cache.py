"""the shared embedding cache on a real redis-server (services/knowledge/embedder.py,
services/backends/redis/embeddings.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from redis.asyncio import Redis

from services.backends.redis.embeddings import RedisEmbeddingCache
from services.backends.redis.keys import KeySpace
from tests.stubs.openai_server import StubOpenAI
from tests.unit.services.knowledge.test_knowledge_embeddings import library, redis, write_docs  # noqa: F401  (redis: the fixture)

KEYS = KeySpace("test", "123456")


async def test_a_failed_embedding_batch_does_not_hold_back_the_next_refresh(
    tmp_path: Path,
    stub_llm: StubOpenAI,
    redis: Redis,  # noqa: F811
) -> None:
    """The worker claims every passage for CLAIM_SECONDS=120, its /embeddings call fails, and the claims
    stay. Its next refresh (15 s later) finds the passages "claimed by another worker" -- itself -- and
    polls for up to 130 s before it swaps in anything: a file added meanwhile reaches no worker within
    the 60 s the issue promises (every worker that shares the cache waits the same way)."""
    write_docs(tmp_path)
    worker = library(tmp_path, stub_llm, RedisEmbeddingCache(redis=redis, keys=KEYS))
    stub_llm.embeddings.mode = "error"
    assert await worker.refresh() is True  # full text only; the passages stay claimed
    stub_llm.embeddings.mode = "ok"  # the endpoint is back
    added = tmp_path / "gift-cards.md"
    added.write_text("# Gift cards\n\nGift cards are sold in the shop and online.\n")
    os.utime(added)
    try:
        await asyncio.wait_for(worker.refresh(), timeout=120)  # a hang guard, not a speed check
    except TimeoutError:
        raise AssertionError("the refresh after one failed batch waited on its own claims for >20 s") from None
    assert any(p.document == "gift-cards.md" for p in worker.current().passages)


async def test_the_cache_does_not_keep_claims_of_embedded_passages(
    tmp_path: Path,
    stub_llm: StubOpenAI,
    redis: Redis,  # noqa: F811
) -> None:
    """Claims are never removed (not after the vector is stored, no TTL), and vectors of changed or
    deleted passages stay forever: both hashes grow with every edit of the documents."""
    write_docs(tmp_path)
    worker = library(tmp_path, stub_llm, RedisEmbeddingCache(redis=redis, keys=KEYS))
    assert await worker.refresh() is True
    claims = KEYS.embedding_claims("stub-embed")
    assert await redis.hlen(claims) == 0, "claims outlive the vectors they were for"


class CountingCache(RedisEmbeddingCache):
    """The real Redis cache, counting how many vectors each refresh reads back."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.read: list[int] = []

    async def get_many(self, model: str, ids):  # type: ignore[no-untyped-def]
        self.read.append(len(ids))
        return await super().get_many(model, ids)


async def test_editing_one_file_does_not_read_every_vector_back_from_redis(
    tmp_path: Path,
    stub_llm: StubOpenAI,
    redis: Redis,  # noqa: F811
) -> None:
    """library._embed asks the cache for every passage of the corpus on every rebuild, though the worker
    holds the vectors already: at 100 k passages of text-embedding-3-small (6 kB each) one edited FAQ
    entry makes every worker pull ~600 MB from Redis."""
    write_docs(tmp_path)
    for n in range(40):
        (tmp_path / f"faq-{n}.md").write_text(f"# FAQ {n}\n\nAnswer number {n} to question {n}.\n")
    cache = CountingCache(redis=redis, keys=KEYS)
    worker = library(tmp_path, stub_llm, cache)
    assert await worker.refresh() is True
    cache.read.clear()
    page = tmp_path / "faq-0.md"
    page.write_text("# FAQ 0\n\nA corrected answer.\n")
    os.utime(page, ns=(page.stat().st_atime_ns, page.stat().st_mtime_ns + 10**9))
    assert await worker.refresh() is True
    assert sum(cache.read) <= 2, f"{sum(cache.read)} vectors read back for one changed passage"
