"""a file name that is not UTF-8 (a Windows/Latin-1 export unpacked on Linux) is read, but its
name reaches the prompt, the stored reply and Telegram as a lone surrogate: the turn fails."""

from __future__ import annotations

import os
from pathlib import Path

from services.backends.memory import InMemorySessionStore
from services.core.tokens import TokenCounter
from services.knowledge.library import KnowledgeLibrary
from services.llm.client import LLMClient
from tests.stubs.openai_server import StubOpenAI
from tests.unit.services.engine.test_grounding import noop, service


def latin1_folder(tmp_path: Path) -> Path:
    raw = os.path.join(os.fsencode(tmp_path), b"retours-pay\xe9s.md")  # "payés" in Latin-1
    with open(raw, "wb") as handle:
        handle.write(b"# Refunds\n\nRefunds are paid to the original card within 14 days.\n")
    return tmp_path


def test_every_passage_source_is_valid_utf8(tmp_path: Path, counter: TokenCounter) -> None:
    library = KnowledgeLibrary(
        root=latin1_folder(tmp_path),
        counter=counter,
        passage_tokens=220,
        max_file_bytes=10**6,
        min_score=0.15,
        refresh_seconds=15,
    )
    library.load()
    for passage in library.current().passages:
        passage.source.encode("utf-8")  # UnicodeEncodeError on main: '\udce9'


async def test_a_turn_whose_prompt_carries_a_non_utf8_named_file_is_answered(
    tmp_path: Path, stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    library = KnowledgeLibrary(
        root=latin1_folder(tmp_path),
        counter=counter,
        passage_tokens=220,
        max_file_bytes=10**6,
        min_score=0.15,
        refresh_seconds=15,
    )
    library.load()
    stub_llm.chat_reply = lambda body: "Refunds take 14 days."  # no citation needed: the prompt itself fails
    chat, store = service(llm, counter, library)  # type: ignore[arg-type]
    # main: UnicodeEncodeError in openai/_utils/_json.py (the source attribute): the turn fails, every
    # turn that retrieves this file's passages, and with KNOWLEDGE_STATIC_TOKENS every turn of every chat
    result = await chat.handle(1, "When will my refund be paid?", deliver=noop)
    assert result.reply == "Refunds take 14 days."
    assert isinstance(store, InMemorySessionStore)


def test_the_operator_listing_survives_a_non_utf8_name(tmp_path: Path, counter: TokenCounter) -> None:
    """``python -m bot knowledge`` writes document.path to a UTF-8 stdout: UnicodeEncodeError."""
    import io

    from bot.cli.knowledge import show

    library = KnowledgeLibrary(
        root=latin1_folder(tmp_path),
        counter=counter,
        passage_tokens=220,
        max_file_bytes=10**6,
        min_score=0.15,
        refresh_seconds=15,
    )
    library.load()
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    assert show(library, out=out) == 0
    out.flush()
