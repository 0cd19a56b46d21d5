"""Hybrid retrieval through the real AsyncOpenAI client and the stub server's /embeddings: each passage
embedded once across two workers on one real redis-server and a restart (and on disk in-process);
an embeddings endpoint that fails, hangs or answers the wrong shape degrades to full text."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from openai import AsyncOpenAI
from redis.asyncio import Redis

from services.backends.embeddings_disk import DiskEmbeddingCache
from services.backends.redis.embeddings import RedisEmbeddingCache
from services.backends.redis.keys import KeySpace
from services.core.knowledge import KnowledgeQuery
from services.core.tokens import TokenCounter
from services.knowledge.embedder import QUERY_PAUSE_SECONDS, Embedder
from services.knowledge.library import KnowledgeLibrary
from services.ports.embeddings import EmbeddingCache
from tests.conftest import RedisServer
from tests.stubs.openai_server import StubOpenAI

DOCS = {
    "returns.md": "# Returns\n\n## Refunds\n\nRefunds are paid to the original card within 14 days.\n\n"
    "## Cancelling\n\nAn order can be cancelled until it ships.\n",
    "delivery.md": "# Delivery\n\n## Times\n\nStandard delivery takes 3-5 working days.\n\n"
    "## Abroad\n\nWe ship to Norway and Switzerland with customs paid by the recipient.\n",
}


def write_docs(root: Path) -> None:
    root.mkdir(exist_ok=True)
    for name, text in DOCS.items():
        (root / name).write_text(text)


def library(root: Path, stub: StubOpenAI, cache: EmbeddingCache, *, timeout: float = 5.0) -> KnowledgeLibrary:
    client = AsyncOpenAI(api_key="sk-test", base_url=stub.base_url, max_retries=0, timeout=10)
    embedder = Embedder(client=client, model="stub-embed", cache=cache, batch_size=2, timeout_seconds=timeout)
    built = KnowledgeLibrary(
        root=root,
        counter=TokenCounter.for_encoding(),
        passage_tokens=100,
        max_file_bytes=10**6,
        min_score=0.2,
        refresh_seconds=60,
        embedder=embedder,
    )
    built.load()
    return built


@pytest.fixture
async def redis(redis_server: RedisServer) -> Redis:
    client = Redis.from_url(redis_server.url)
    await client.flushall()
    yield client
    await client.aclose()


async def test_two_workers_and_a_restart_embed_each_passage_once(
    tmp_path: Path, stub_llm: StubOpenAI, redis: Redis
) -> None:
    write_docs(tmp_path)
    keys = KeySpace("test", "123456")
    workers = [library(tmp_path, stub_llm, RedisEmbeddingCache(redis=redis, keys=keys)) for _ in range(2)]
    assert all(w.needs_vectors for w in workers), "load builds the full-text index only"
    assert await asyncio.gather(*(w.refresh() for w in workers)) == [True, True]
    passages = workers[0].current().passages
    embedded = stub_llm.embeddings.embedded
    assert len(embedded) == len(passages) == len(set(embedded)), "each passage embedded once, by one worker"
    assert all(w.current().embedded == len(passages) for w in workers)
    restarted = library(tmp_path, stub_llm, RedisEmbeddingCache(redis=redis, keys=keys))
    assert await restarted.refresh() is True
    assert len(stub_llm.embeddings.embedded) == len(passages), "the restart embedded nothing"
    found = await restarted.current().search(KnowledgeQuery("do you ship to norway?"), limit=3)
    assert found.passages[0].passage.headings == ("Delivery", "Abroad") and not found.degraded
    assert found.passages[0].vector_rank is not None and found.passages[0].fulltext_rank is not None
    before = len(stub_llm.embeddings.embedded)
    (tmp_path / "returns.md").write_text(DOCS["returns.md"] + "\n## Exchanges\n\nExchanges are free.\n")
    assert await restarted.refresh() is True
    assert stub_llm.embeddings.embedded[before:] == ["Returns › Returns › Exchanges\nExchanges are free."], (
        "a changed file re-embeds only its new passage"
    )


async def test_in_process_vectors_survive_a_restart_on_disk(tmp_path: Path, stub_llm: StubOpenAI) -> None:
    write_docs(tmp_path / "kb")
    first = library(tmp_path / "kb", stub_llm, DiskEmbeddingCache(directory=tmp_path / "cache"))
    await first.refresh()
    count = len(stub_llm.embeddings.embedded)
    assert count == len(first.current().passages)
    second = library(tmp_path / "kb", stub_llm, DiskEmbeddingCache(directory=tmp_path / "cache"))
    await second.refresh()
    assert len(stub_llm.embeddings.embedded) == count and second.current().embedded == count


@pytest.mark.parametrize("mode", ["error", "rate_limited", "hang", "wrong_count"])
async def test_a_failing_embeddings_endpoint_degrades_to_full_text(
    tmp_path: Path, stub_llm: StubOpenAI, mode: str
) -> None:
    write_docs(tmp_path / "kb")
    built = library(tmp_path / "kb", stub_llm, DiskEmbeddingCache(directory=tmp_path / "cache"), timeout=0.3)
    await built.refresh()
    stub_llm.embeddings.mode = mode  # type: ignore[assignment]
    found = await built.current().search(KnowledgeQuery("how long does standard delivery take?"), limit=3)
    assert found.degraded and found.passages[0].passage.headings == ("Delivery", "Times")
    assert found.passages[0].vector_rank is None
    if mode != "hang":
        fresh = library(tmp_path / "other", stub_llm, DiskEmbeddingCache(directory=tmp_path / "cache2"))
        write_docs(tmp_path / "other")
        await fresh.refresh()
        assert fresh.current().embedded == 0 and fresh.needs_vectors, "no vectors, full text, retried later"
        results = await fresh.current().search(KnowledgeQuery("how long does standard delivery take?"), limit=3)
        assert results.passages[0].passage.headings == ("Delivery", "Times")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_after_a_failed_query_embedding_turns_go_full_text_at_once_until_one_trial_works(
    tmp_path: Path, stub_llm: StubOpenAI
) -> None:
    write_docs(tmp_path / "kb")
    clock = Clock()
    client = AsyncOpenAI(api_key="sk-test", base_url=stub_llm.base_url, max_retries=0, timeout=10)
    embedder = Embedder(
        client=client, model="stub-embed", cache=DiskEmbeddingCache(directory=tmp_path / "c"), clock=clock
    )
    built = KnowledgeLibrary(
        root=tmp_path / "kb",
        counter=TokenCounter.for_encoding(),
        passage_tokens=100,
        max_file_bytes=10**6,
        min_score=0.2,
        refresh_seconds=60,
        embedder=embedder,
    )
    built.load()
    await built.refresh()
    question = KnowledgeQuery("how long does standard delivery take?")
    stub_llm.embeddings.mode = "error"
    requests = len(stub_llm.embeddings.requests)
    assert (await built.current().search(question, limit=3)).degraded
    assert len(stub_llm.embeddings.requests) == requests + 1
    stub_llm.embeddings.mode = "ok"
    for _ in range(5):  # the endpoint is back, but within the pause nobody asks it
        clock.now += QUERY_PAUSE_SECONDS / 10
        found = await built.current().search(question, limit=3)
        assert found.degraded and found.passages[0].passage.headings == ("Delivery", "Times")
    assert len(stub_llm.embeddings.requests) == requests + 1, "no request while paused"
    clock.now += QUERY_PAUSE_SECONDS
    found = await built.current().search(question, limit=3)
    assert not found.degraded and found.passages[0].vector_rank is not None, "one trial, and it worked"
    assert not (await built.current().search(question, limit=3)).degraded
