"""A long knowledge build is never silent: every file read and every batch of passages embedded is
a progress event (counted here, not timed), the bot logs one of them every few seconds and draws a
bar when stderr is a terminal."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from bot.cli.progress import TerminalBar, progress_sink
from services.backends.embeddings_disk import DiskEmbeddingCache
from services.core.tokens import TokenCounter
from services.knowledge import library as library_module
from services.knowledge.embedder import Embedder
from services.knowledge.library import KnowledgeLibrary
from services.knowledge.progress import IndexProgress, ProgressLog
from tests.stubs.openai_server import StubOpenAI

FILES = 7


def write_folder(root: Path) -> None:
    for n in range(FILES):
        (root / f"topic{n}.md").write_text(f"# Topic {n}\n\n## Part A\n\nAnswer {n} a.\n\n## Part B\n\nAnswer {n} b.\n")
    (root / "notes.xyz").write_text("not a document")  # a skipped file is a file read too


def make_library(root: Path, events: list[IndexProgress], embedder: Embedder | None = None) -> KnowledgeLibrary:
    return KnowledgeLibrary(
        root=root,
        counter=TokenCounter.for_encoding(),
        passage_tokens=100,
        max_file_bytes=10**6,
        min_score=0.2,
        refresh_seconds=60,
        embedder=embedder,
        progress=events.append,
    )


def test_every_file_read_is_a_progress_event(tmp_path: Path) -> None:
    write_folder(tmp_path)
    events: list[IndexProgress] = []
    knowledge = make_library(tmp_path, events)
    knowledge.load()
    assert [(e.stage, e.done, e.total) for e in events] == [("reading", n, FILES + 1) for n in range(1, FILES + 2)]
    passages = [e.passages for e in events]
    assert passages == sorted(passages) and passages[-1] == len(knowledge.current().passages) > FILES


async def test_embedding_reports_each_batch_of_passages(
    tmp_path: Path, stub_llm: StubOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(library_module, "EMBED_PROGRESS_PASSAGES", 4)
    write_folder(tmp_path)
    client = AsyncOpenAI(api_key="sk-test", base_url=stub_llm.base_url, max_retries=0, timeout=10)
    embedder = Embedder(client=client, model="stub-embed", cache=DiskEmbeddingCache(directory=tmp_path / ".cache"))
    events: list[IndexProgress] = []
    knowledge = make_library(tmp_path, events, embedder)
    knowledge.load()
    events.clear()
    assert await knowledge.refresh() is True
    embedding = [e for e in events if e.stage == "embedding"]
    total = len(knowledge.current().passages)
    assert [e.done for e in embedding] == [*range(4, total, 4), total]
    assert all(e.total == total for e in embedding) and knowledge.current().embedded == total


def test_the_log_gets_a_line_every_few_seconds_of_a_long_build(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    sink = ProgressLog(every=5.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO)
    for done in range(1, 301):  # 300 files, one every 0.1 s: 30 s
        now[0] = done * 0.1
        sink(IndexProgress("reading", done, 300, done * 3))
    lines = [r.getMessage() for r in caplog.records if "knowledge: read" in r.getMessage()]
    assert len(lines) == 6, lines  # at 5.1, 10.1, ... 25.1 s after the first file, and the last one
    assert lines[0] == "knowledge: read 51 of 300 files, 153 passages"
    assert lines[-1] == "knowledge: read 300 of 300 files, 900 passages; indexing"


def test_a_short_build_logs_no_progress(caplog: pytest.LogCaptureFixture) -> None:
    sink = ProgressLog(every=5.0, clock=lambda: 1.0)
    caplog.set_level(logging.INFO)
    for done in range(1, 11):
        sink(IndexProgress("reading", done, 10, done))
    assert not caplog.records


def test_a_terminal_gets_a_bar_and_a_pipe_gets_log_lines() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = progress_sink(screen)
    assert isinstance(bar, TerminalBar)
    bar(IndexProgress("reading", 1, 4, 3))
    bar(IndexProgress("reading", 4, 4, 9))
    drawn = screen.getvalue()
    assert "\r\x1b[2Kknowledge [" + "#" * 7 + "-" * 23 + "] read 1 of 4 files, 3 passages" in drawn
    assert drawn.endswith("] read 4 of 4 files, 9 passages\n")
    assert isinstance(progress_sink(io.StringIO()), ProgressLog)
