"""What the bot knows, for operators, from the same code and settings the bot runs with.

python -m bot knowledge                 documents, passages, skipped files and why, index version
python -m bot knowledge search "query"  ranked passages with their relevance, as a turn would get them
python -m bot knowledge search "query" --explain   and per passage the matched terms, the score parts and
                                        why passages were cut (floor, top k, token budget)
python -m bot knowledge gaps            unanswered questions, near-duplicates grouped (REDIS_URL)
python -m bot knowledge faq export      the learned FAQ entries as Markdown (--output FILE)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TextIO

import numpy as np

from services.core.knowledge import FaqEntry, KnowledgeQuery, ScoredPassage
from services.core.tokens import TokenCounter
from services.engine.grounding import knowledge_block
from services.knowledge.embedder import Embedder, EmbeddingUnavailable
from services.knowledge.library import KnowledgeLibrary
from services.knowledge.snapshot import Candidate
from services.ports.knowledge import KnowledgeGaps, LearnedFaq


def show(library: KnowledgeLibrary, out: TextIO = sys.stdout) -> int:
    snapshot = library.current()
    for document in library.documents:
        link = f"\t{document.url}" if document.url else ""
        out.write(f"{document.path}\t{document.title}\t{document.passages} passages\t{document.tokens} tokens{link}\n")
    for skipped in snapshot.skipped:
        out.write(f"skipped\t{skipped.path}\t{skipped.reason}\n")
    out.write(
        f"index {snapshot.version}: {len(library.documents)} documents, {len(snapshot.passages)} passages "
        f"({snapshot.total_tokens} tokens; {len(library.learned)} of learned FAQ entries), "
        f"{len(snapshot.skipped)} skipped, {snapshot.embedded} with vectors; "
        f"from {library.root}\n"
    )
    return 0


def _ranked(scored: ScoredPassage, fused: bool) -> str:
    """The key the list is sorted by first, then the rest: with vectors the fused score (higher
    first); full text alone BM25's rank, with the relevance that clears KNOWLEDGE_MIN_SCORE beside it
    (a lower-ranked passage can cover more of the question's words)."""
    if fused:
        ranks = f"full-text #{scored.fulltext_rank or '-'}, vector #{scored.vector_rank or '-'}"
        return f"fused {scored.score:.4f} ({ranks})"
    return f"full-text #{scored.fulltext_rank or '-'} (relevance {scored.score:.3f})"


async def search(library: KnowledgeLibrary, query: str, *, limit: int, out: TextIO = sys.stdout) -> int:
    retrieval = await library.current().search(KnowledgeQuery(query), limit=limit)
    if not retrieval.passages:
        out.write("no passage clears KNOWLEDGE_MIN_SCORE: the bot would say the documents do not cover this\n")
        return 1
    fused = any(scored.vector_rank is not None for scored in retrieval.passages)
    order = (
        "fused rank of full text and vectors (score: reciprocal-rank fusion)"
        if fused
        else "full-text (BM25) rank; relevance: how much of the question a passage covers"
    )
    out.write(f"in the order a turn gets them: {order}\n")
    for rank, scored in enumerate(retrieval.passages, start=1):
        text = " ".join(scored.passage.text.split())
        out.write(f"{rank}. {_ranked(scored, fused)}  {scored.passage.source}  [{scored.passage.id}]\n")
        out.write(f"   {text[:300]}\n")
    out.write(f"{len(retrieval.passages)} passage(s) in {retrieval.seconds * 1000:.1f} ms\n")
    return 0


async def explain(
    library: KnowledgeLibrary, query: str, *, limit: int, budget: int, counter: TokenCounter, out: TextIO = sys.stdout
) -> int:
    """Every passage either ranking put forward for ``query``: matched terms after stemming, the
    score parts, and whether it is sent or why not (the floor, the top k, the token budget; the
    budget as a turn applies it, whole passages in rank order)."""
    snapshot = library.current()
    asked = KnowledgeQuery(query)
    vector, degraded = await snapshot.query_vector(asked)
    found = snapshot.candidates(asked, limit=limit, query_vector=vector)
    out.write(
        f"floor: relevance >= {snapshot.min_score} (KNOWLEDGE_MIN_SCORE)"
        + (f" or similarity >= {snapshot.min_similarity}" if vector is not None else "")
        + f"; top {limit}; budget {budget} tokens"
        + ("; the embeddings call failed: full text only" if degraded else "")
        + "\n"
    )
    blocks: list[str] = []
    sent = 0
    for rank, candidate in enumerate(found, start=1):
        passage = snapshot.passages[candidate.index]
        cut = candidate.cut
        if cut is None:
            block = knowledge_block(passage, f"K{len(blocks) + 1}")
            if counter.count_text("\n".join((*blocks, block))) > budget:
                cut = "budget"
            else:
                blocks.append(block)
                sent += 1
        out.write(f"{rank}. {_verdict(cut)}  {passage.source}  [{passage.id}]\n")
        out.write(f"   {_parts(candidate)}\n")
        out.write(f"   matched: {', '.join(snapshot.matched_terms(asked, candidate.index)) or '(none)'}\n")
    out.write(f"{sent} of {len(found)} passage(s) sent\n")
    return 0 if sent else 1


def _verdict(cut: str | None) -> str:
    return {
        None: "SENT",
        "floor": "cut: below the floor",
        "limit": "cut: past KNOWLEDGE_TOP_K",
        "budget": "cut: over KNOWLEDGE_TOKEN_BUDGET",
    }.get(cut, f"cut: {cut}")


def _parts(candidate: Candidate) -> str:
    parts = [f"full text {candidate.fulltext:.3f} (#{candidate.fulltext_rank or '-'})"]
    parts.append(f"relevance {candidate.relevance:.3f}")
    if candidate.similarity is not None or candidate.vector_rank is not None:
        parts.append(f"vector {candidate.similarity or 0.0:.3f} (#{candidate.vector_rank or '-'})")
    if candidate.fused is not None:
        parts.append(f"fusion {candidate.fused:.4f}")
    return ", ".join(parts)


async def gaps(store: KnowledgeGaps, *, embedder: Embedder | None = None, out: TextIO = sys.stdout) -> int:
    """The unanswered questions in groups of near-duplicates, most asked first, with up to three
    examples each (the most asked questions only: GROUPED_QUESTIONS); with ``embedder``
    (EMBEDDING_MODEL) questions close in meaning are grouped too."""
    from services.knowledge.gap_groups import GROUPED_QUESTIONS, group_questions

    asked = await store.top(GROUPED_QUESTIONS + 1)
    vectors = await _vectors(embedder, [q for q, _ in asked[:GROUPED_QUESTIONS]], out)
    grouping = group_questions(asked, cap=GROUPED_QUESTIONS, vectors=vectors)
    for group in grouping.groups:
        out.write(f"{group.count}\t{group.examples[0]}\t({group.questions} question(s))\n")
        for example in group.examples[1:]:
            out.write(f"\t· {example}\n")
    how = " by words and meaning (EMBEDDING_MODEL)" if vectors else ""
    out.write(
        f"{len(grouping.groups)} group(s){how} of {grouping.questions} unanswered question(s) (most asked first)\n"
    )
    if grouping.left_out:
        out.write(f"only the {GROUPED_QUESTIONS} most asked questions were grouped; rarer ones were left out\n")
    return 0


async def _vectors(embedder: Embedder | None, questions: list[str], out: TextIO) -> dict[str, np.ndarray] | None:
    if embedder is None or not questions:
        return None
    try:
        matrix = await embedder.embed_texts(questions)
    except EmbeddingUnavailable as exc:
        out.write(f"embeddings unavailable ({exc}): grouped by words only\n")
        return None
    return dict(zip(questions, matrix, strict=True))


def faq_markdown(entries: list[FaqEntry]) -> str:
    """One section per entry: its question as the heading, the other questions, the answer; a file
    of KNOWLEDGE_DIR (the Markdown reader cuts a heading with its text into one passage). Nothing
    else: whatever the file holds is indexed (who wrote an entry stays in Redis)."""
    parts = ["---\ntitle: FAQ, answered by the support team\n---\n"]
    for entry in entries:
        heading = " ".join(entry.questions[0].split()).lstrip("#").strip()
        more = "".join(f"_Also asked:_ {' '.join(q.split())}\n\n" for q in entry.questions[1:])
        parts.append(f"## {heading}\n\n{more}{entry.answer.strip()}\n")
    return "\n".join(parts)


async def export_faq(faq: LearnedFaq, *, output: Path | None = None, out: TextIO = sys.stdout) -> int:
    entries = await faq.entries()
    text = faq_markdown(entries)
    if output is None:
        out.write(text)
    else:
        await asyncio.to_thread(output.write_text, text, encoding="utf-8")
        out.write(f"{len(entries)} learned FAQ entries written to {output}\n")
    return 0
