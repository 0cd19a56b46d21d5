"""``python -m bot knowledge search "…" --explain``: per passage the matched terms after stemming,
the score parts, and why a passage was cut (floor, top k, token budget), so an operator can see why a
question found nothing."""

from __future__ import annotations

import io
from pathlib import Path

from bot.cli.knowledge import explain
from services.core.tokens import TokenCounter
from services.knowledge.library import KnowledgeLibrary

PAGES = {
    "iconv.md": "# Кодировки\n\nПараметр --list выводит все известные кодировки символов.\n",
    "ls.md": "# Список файлов\n\nФайлы выводятся по алфавиту, каталоги тоже.\n",
    "hosts.md": "# Hosts\n\nThe hosts file maps host names to addresses.\n",
}


def library(tmp_path: Path, counter: TokenCounter, *, min_score: float) -> KnowledgeLibrary:
    for name, text in PAGES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    found = KnowledgeLibrary(
        root=tmp_path,
        counter=counter,
        passage_tokens=220,
        max_file_bytes=10**6,
        min_score=min_score,
        refresh_seconds=15,
    )
    found.load()
    return found


async def run(found: KnowledgeLibrary, query: str, counter: TokenCounter, *, limit: int = 6, budget: int = 1500) -> str:
    out = io.StringIO()
    await explain(found, query, limit=limit, budget=budget, counter=counter, out=out)
    return out.getvalue()


async def test_explain_shows_matched_stems_and_score_parts(tmp_path: Path, counter: TokenCounter) -> None:
    text = await run(library(tmp_path, counter, min_score=0.1), "список всех кодировок", counter)
    lines = text.splitlines()
    at = next(n for n, line in enumerate(lines) if "SENT  iconv.md › Кодировки" in line)
    assert "full text " in lines[at + 1] and "relevance " in lines[at + 1], text
    assert lines[at + 2].strip() == "matched: кодир*", "«кодировок» met «кодировки» by its head: " + text
    at = next(n for n, line in enumerate(lines) if "SENT  ls.md › Список файлов" in line)
    assert lines[at + 2].strip() == "matched: список", text
    assert text.endswith("2 of 2 passage(s) sent\n"), text


async def test_explain_tells_the_floor_the_top_k_and_the_budget_apart(tmp_path: Path, counter: TokenCounter) -> None:
    found = library(tmp_path, counter, min_score=0.9)
    text = await run(found, "список всех кодировок", counter)
    assert "SENT" not in text and "cut: below the floor" in text and "0 of " in text, text
    found = library(tmp_path, counter, min_score=0.0)
    assert "cut: past KNOWLEDGE_TOP_K" in await run(found, "список всех кодировок", counter, limit=1)
    assert "cut: over KNOWLEDGE_TOKEN_BUDGET" in await run(found, "список всех кодировок", counter, budget=30)
