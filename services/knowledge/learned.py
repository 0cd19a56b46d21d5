"""Learned FAQ entries as data and as knowledge: their JSON (one shape in every backend), their
bounds, and the passages an entry becomes (cited as FAQ_SOURCE, cut like a document's section)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from services.core.knowledge import FAQ_SOURCE, DigestPost, FaqEntry, Passage
from services.core.tokens import TokenCounter
from services.knowledge.documents import Document, Section, squash
from services.knowledge.passages import cut_passages

QUESTION_CHARS = 300
ANSWER_CHARS = 3000
QUESTIONS_KEPT = 3
"""An entry keeps at most this many questions (a digest group's examples)."""
DIGEST_POST_DAYS = 30
"""How long a digest message can still be answered by a reply."""


def clean_questions(questions: Sequence[str]) -> tuple[str, ...]:
    kept = [squash(q)[:QUESTION_CHARS] for q in questions]
    return tuple(dict.fromkeys(q for q in kept if q))[:QUESTIONS_KEPT]


def clean_answer(answer: str) -> str:
    return answer.strip()[:ANSWER_CHARS]


def version_json(questions: tuple[str, ...], answer: str, author: str, created: float) -> str:
    body = {"q": list(questions), "a": answer, "by": author[:100], "at": round(created, 3)}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def entry_from(entry_id: str, version: int, raw: str | bytes) -> FaqEntry:
    data = json.loads(raw)
    questions = tuple(str(q) for q in data["q"])
    return FaqEntry(entry_id, questions, str(data["a"]), str(data["by"]), float(data["at"]), version)


def post_json(post: DigestPost) -> str:
    return json.dumps({"q": list(post.questions), "n": post.count}, ensure_ascii=False, separators=(",", ":"))


def post_from(raw: str | bytes) -> DigestPost:
    data = json.loads(raw)
    return DigestPost(tuple(str(q) for q in data["q"]), int(data["n"]))


def entry_passages(entry: FaqEntry, *, counter: TokenCounter, max_tokens: int) -> list[Passage]:
    """The entry as passages: its questions then its answer, titled by its first question, cited
    as FAQ_SOURCE (ids by content, as a document's, so an unchanged entry keeps its vector)."""
    body = "\n".join((*entry.questions, "", entry.answer))
    document = Document(
        path=f"faq#{entry.id}", title=entry.questions[0], url=None, sections=(Section(headings=(), text=body),)
    )
    return [replace(p, document=FAQ_SOURCE) for p in cut_passages(document, counter=counter, max_tokens=max_tokens)]
