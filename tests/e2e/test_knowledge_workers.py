"""KNOWLEDGE_DIR across worker processes: two real ``python -m bot`` webhook workers on one real
redis-server, the stub Bot API and the stub model server (chat and /embeddings), EMBEDDING_MODEL set,
KNOWLEDGE_REFRESH_SECONDS=1. A question is answered from a document (the passage after the history);
a file added, changed and deleted while they run reaches every worker (each one's /metrics
sb_knowledge_passages and the index version it logs); each passage is embedded once across the two,
even embedding at the same moment (the stub holds /embeddings until both are at it), and after both
restart none is embedded again (only questions are)."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from services.core.tokens import TokenCounter
from services.engine.grounding import NO_KNOWLEDGE
from services.knowledge.corpus import read_corpus
from services.knowledge.embedder import passage_text
from tests.conftest import RedisServer, free_port
from tests.e2e.processes import BotProcess, start_webhook_worker
from tests.e2e.test_faults import KEYS, post, worker_env
from tests.e2e.test_knowledge import RETURNS, cite_first, knowledge_part
from tests.e2e.waiting import eventually
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

DELIVERY = """# Delivery

## Delivery times

Standard delivery takes 3-5 working days; express delivery arrives the next working day.
"""
GIFT_CARDS = "# Gift cards\n\nGift cards are sold in every store, from 10 to 500 EUR.\n"
INDEX_LINE = re.compile(r"knowledge: index (\w+)(?: from \S+)?: \d+ documents, (\d+) passages")


def passage_texts(folder: Path) -> set[str]:
    """The texts a worker sends /embeddings for the folder's passages (as the workers cut them)."""
    corpus = read_corpus(folder, counter=TokenCounter.for_encoding(), passage_tokens=220, max_file_bytes=10**7)
    return {passage_text(p) for p in corpus.passages}


class Worker:
    def __init__(self, process: BotProcess, url: str, metrics_port: int) -> None:
        self.process, self.url, self.metrics = process, url, f"http://127.0.0.1:{metrics_port}/metrics"

    def indexes(self) -> list[tuple[str, int]]:
        """(version, passages) of every index this worker built, in order (from its log)."""
        found = INDEX_LINE.findall(self.process.log.decode(errors="replace"))
        return [(version, int(passages)) for version, passages in found]

    async def passages(self) -> int:
        """sb_knowledge_passages: the passages of the index this worker serves now."""
        async with aiohttp.ClientSession() as http, http.get(self.metrics) as response:
            text = await response.text()
        return int(float(re.search(r"^sb_knowledge_passages (\S+)$", text, re.MULTILINE)[1]))  # type: ignore[index]


async def start_workers(env: dict[str, str], workdir: Path, processes: list[BotProcess]) -> list[Worker]:
    """Two workers side by side, each with its own metrics port."""
    ports = [free_port(), free_port()]
    first = len(processes)
    urls = await asyncio.gather(
        *(start_webhook_worker(env | {"METRICS_PORT": str(port)}, workdir, processes) for port in ports)
    )
    return [Worker(processes[first + i], url, port) for i, (url, port) in enumerate(zip(urls, ports, strict=True))]


async def loaded(workers: list[Worker]) -> str:
    """The version of the full-text index the workers built at start-up (before any vectors)."""

    async def logged() -> bool:
        return all(w.indexes() for w in workers)

    await eventually(logged, within=10, what="the start-up index in every log")
    assert len({w.indexes()[0] for w in workers}) == 1
    return workers[0].indexes()[0][0]


async def every_worker_serves(workers: list[Worker], passages: int, *, not_version: str | None, what: str) -> str:
    """Wait until every worker serves ``passages`` passages and has logged one index version, the
    same for all and not ``not_version``, with vectors (a rebuild that embeds logs again); return it."""

    async def converged() -> bool:
        latest = [w.indexes()[-1] if w.indexes() else None for w in workers]
        served = [await w.passages() for w in workers]
        versions = {entry[0] for entry in latest if entry is not None}
        return (
            served == [passages] * len(workers)
            and all(entry is not None and entry[1] == passages for entry in latest)
            and len(versions) == 1
            and not_version not in versions
        )

    await eventually(converged, within=15, what=what)
    return workers[0].indexes()[-1][0]


async def both_embedding_at_once(stub_llm: StubOpenAI, redis: Redis) -> None:
    """Hold /embeddings (its gate closed) until both workers are in their first embedding at once: two
    passage requests arrived (each worker embeds all: the test then fails), or one did and the other
    worker is polling the cache for the passages it claimed (HMGET: the embedding cache's only one
    while no dead letters are listed; counted since the test reset the server's statistics); then
    open the gate."""
    gate = stub_llm.embeddings.gate
    assert gate is not None

    async def both_in() -> bool:
        stats = await redis.info("commandstats")
        hmgets = int(stats.get("cmdstat_hmget", {}).get("calls", 0))
        requests = len(stub_llm.embeddings.requests)
        return requests >= 2 or (requests == 1 and hmgets >= 3)

    try:
        await eventually(both_in, within=20, what="both workers embedding their first index")
    finally:
        gate.set()
        stub_llm.embeddings.gate = None


def embedded_once(stub_llm: StubOpenAI, texts: Iterable[str]) -> None:
    counts = Counter(stub_llm.embeddings.embedded)
    wanted = set(texts)
    assert {text: counts[text] for text in wanted} == dict.fromkeys(wanted, 1), "each passage embedded once"


async def test_two_workers_follow_the_folder_and_embed_each_passage_once(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "returns.md").write_text(RETURNS)
    (folder / "delivery.md").write_text(DELIVERY)
    stub_llm.chat_reply = cite_first
    env = worker_env(
        telegram,
        stub_llm,
        redis_server.url,
        LOG_LEVEL="INFO",
        METRICS_HOST="127.0.0.1",
        DRAFTS_ENABLED="false",
        KNOWLEDGE_DIR=str(folder),
        EMBEDDING_MODEL="stub-embed",
        KNOWLEDGE_REFRESH_SECONDS="1",
    )
    every_text = passage_texts(folder)
    await real_redis.config_resetstat()  # (real_redis flushed the session's server) HMGETs counted from here
    stub_llm.embeddings.gate = asyncio.Event()
    workers = await start_workers(env, tmp_path, processes)
    full_text = await loaded(workers)
    await both_embedding_at_once(stub_llm, real_redis)
    hybrid = await every_worker_serves(workers, len(every_text), not_version=full_text, what="both with vectors")
    embedded_once(stub_llm, every_text)

    # a. the passage after the history
    chat = 901
    assert await post(workers[0].url, telegram.message_update(chat, "Hi, I sent my parcel back yesterday.")) == 200
    await telegram.wait_messages(chat, 1, within=20)
    assert await post(workers[1].url, telegram.message_update(chat, "When will the refund be paid?")) == 200
    replies = await telegram.wait_messages(chat, 2, within=20)
    request = stub_llm.chat_requests[-1]
    assert "sent my parcel back" in str(request["messages"][1]["content"]), "history first"
    assert knowledge_part(request).startswith('<knowledge source="returns.md › Returns › Refunds" ref="K1">')
    assert "within 14 days" in knowledge_part(request)
    assert "When will the refund be paid?" in str(request["messages"][-1]["content"])
    assert replies[-1].startswith("Here is what our policy says [1].")

    # b. added, changed, deleted: every worker swaps its index (each one's gauge and logged version; the
    # prompts show the content: which worker serves a queued chat is not the posting one's choice)
    (folder / "giftcards.md").write_text(GIFT_CARDS)
    every_text |= passage_texts(folder)
    added = await every_worker_serves(workers, len(passage_texts(folder)), not_version=hybrid, what="the added file")
    for n, worker in enumerate(workers):
        asker = 910 + n
        assert await post(worker.url, telegram.message_update(asker, "Do you sell gift cards?")) == 200
        await telegram.wait_messages(asker, 1, within=20)
        asked = [r for r in stub_llm.chat_requests if "Do you sell gift cards?" in str(r["messages"][-1]["content"])]
        assert "Gift cards are sold" in knowledge_part(asked[-1])

    (folder / "returns.md").write_text(RETURNS.replace("14 days", "30 days"))
    every_text |= passage_texts(folder)
    changed = await every_worker_serves(workers, len(passage_texts(folder)), not_version=added, what="the change")
    (folder / "giftcards.md").unlink()
    deleted = await every_worker_serves(workers, len(passage_texts(folder)), not_version=changed, what="the delete")
    for n, worker in enumerate(workers):
        asker = 920 + n
        assert await post(worker.url, telegram.message_update(asker, "When will the refund be paid?")) == 200
        await telegram.wait_messages(asker, 1, within=20)
        assert await post(worker.url, telegram.message_update(asker, "Do you sell gift cards?")) == 200
        await telegram.wait_messages(asker, 2, within=20)
    late = stub_llm.chat_requests[-4:]
    refunds = [knowledge_part(r) for r in late if "refund" in str(r["messages"][-1]["content"])]
    assert len(refunds) == 2 and all("30 days" in k and "14 days" not in k for k in refunds), "new text, old gone"
    gifts = [knowledge_part(r) for r in late if "gift cards" in str(r["messages"][-1]["content"])]
    assert gifts == [NO_KNOWLEDGE, NO_KNOWLEDGE], "the deleted file's passages are in no prompt"

    # c. each passage embedded once across both workers; a restart of both embeds only questions
    embedded_once(stub_llm, every_text)
    passages_sent = [t for t in stub_llm.embeddings.embedded if t in every_text]
    assert all(w.process.log.count(b"passages not embedded") == 0 for w in workers)
    assert await asyncio.gather(*(w.process.stop() for w in workers)) == [0, 0]
    # every claim was released once its vectors were stored: a restart finds none, only the cache answers
    assert await real_redis.exists(KEYS.embedding_claims("stub-embed")) == 0
    workers = await start_workers(env, tmp_path, processes)
    restarted = await loaded(workers)
    again = await every_worker_serves(workers, len(passage_texts(folder)), not_version=restarted, what="the restart")
    assert again == deleted, "the restarted workers serve the same index, with vectors"
    assert await post(workers[0].url, telegram.message_update(930, "Is express delivery faster?")) == 200
    await telegram.wait_messages(930, 1, within=20)
    assert "express delivery" in knowledge_part(stub_llm.chat_requests[-1])
    assert [t for t in stub_llm.embeddings.embedded if t in every_text] == passages_sent, "no passage embedded again"
    assert stub_llm.embeddings.embedded[-1].startswith("Is express delivery faster?"), "the question is"
