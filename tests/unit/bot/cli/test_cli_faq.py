"""``python -m bot knowledge gaps`` prints the unanswered questions in groups with their examples;
``knowledge faq export`` writes the learned entries as Markdown that, moved into KNOWLEDGE_DIR, is
read back as one passage per entry with its question and answer."""

from __future__ import annotations

import io
from pathlib import Path

from openai import AsyncOpenAI

from bot.cli.knowledge import export_faq, gaps
from services.backends.embeddings_disk import DiskEmbeddingCache
from services.backends.memory.faq import InMemoryLearnedFaq
from services.backends.memory.gaps import InMemoryKnowledgeGaps
from services.core.tokens import TokenCounter
from services.knowledge.corpus import read_corpus
from services.knowledge.embedder import Embedder
from tests.stubs.openai_server import StubOpenAI


async def test_gaps_are_printed_in_groups_most_asked_first() -> None:
    store = InMemoryKnowledgeGaps()
    asked = ["Сколько стоит доставка в Казань?", "сколько стоят доставки в казань", "can I pay with bitcoin?"]
    for chat, question in enumerate([*asked, asked[0], asked[2], asked[2], asked[2]]):
        await store.record(chat, question)
    out = io.StringIO()
    assert await gaps(store, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "4\tcan i pay with bitcoin?\t(1 question(s))"
    assert lines[1] == "3\tсколько стоит доставка в казань?\t(2 question(s))"
    assert lines[2] == "\t· сколько стоят доставки в казань"
    assert lines[3] == "2 group(s) of 3 unanswered question(s) (most asked first)"


async def test_the_export_is_markdown_the_folder_reads_as_one_passage_per_entry(
    tmp_path: Path, counter: TokenCounter
) -> None:
    faq = InMemoryLearnedFaq()
    await faq.add(("Можно ли оплатить картой Мир?", "оплата картой мир"), "Да, картой Мир можно.", author="Olga")
    removed = await faq.add(("Old question?",), "Old answer.", author="Ivan")
    await faq.add(("## Is a heading *safe*?",), "Yes.\n\nTwo paragraphs.", author="Ivan")
    await faq.remove(removed.id)
    target = tmp_path / "kb" / "learned-faq.md"
    target.parent.mkdir()
    out = io.StringIO()
    assert await export_faq(faq, output=target, out=out) == 0
    assert out.getvalue() == f"2 learned FAQ entries written to {target}\n"
    text = target.read_text(encoding="utf-8")
    assert "## Можно ли оплатить картой Мир?" in text and "Old answer" not in text
    corpus = read_corpus(target.parent, counter=counter, passage_tokens=220, max_file_bytes=1 << 20)
    assert [(p.headings, "Мир можно" in p.text or "Two paragraphs" in p.text) for p in corpus.passages] == [
        (("Можно ли оплатить картой Мир?",), True),
        (("Is a heading *safe*?",), True),
    ]
    printed = io.StringIO()
    assert await export_faq(faq, out=printed) == 0
    assert printed.getvalue() == text


async def test_with_embedding_model_the_questions_are_embedded_uncached_and_grouped_by_meaning_too(
    stub_llm: StubOpenAI, tmp_path: Path
) -> None:
    store = InMemoryKnowledgeGaps()
    for chat, question in enumerate(["where is the parcel tracking", "tracking parcel where?", "is wrapping free?"]):
        await store.record(chat, question)
    client = AsyncOpenAI(api_key="k", base_url=stub_llm.base_url, max_retries=0)
    cache = DiskEmbeddingCache(directory=tmp_path / "cache")
    embedder = Embedder(client=client, model="stub-embed", cache=cache, batch_size=2)
    out = io.StringIO()
    try:
        assert await gaps(store, embedder=embedder, out=out) == 0
        stub_llm.embeddings.mode = "error"
        failed = io.StringIO()
        assert await gaps(store, embedder=embedder, out=failed) == 0
    finally:
        await client.close()
    assert sorted(stub_llm.embeddings.embedded[:3]) == sorted(q for q, _ in await store.top(10)), "batches of 2"
    assert (
        out.getvalue().splitlines()[-1]
        == "2 group(s) by words and meaning (EMBEDDING_MODEL) of 3 unanswered question(s) (most asked first)"
    )
    assert failed.getvalue().startswith("embeddings unavailable (") and "grouped by words only" in failed.getvalue()
