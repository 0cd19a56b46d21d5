"""End to end, hostile PDFs (issue 36): real aiogram Bot/Dispatcher ↔ stub Bot API, real AsyncOpenAI
↔ stub model server, a real redis-server. A 7 kB PDF whose page draws a 2 MB form twenty times (main:
105 s of one worker's CPU, then "could not open") and a 16 MB PDF of 100 000 pages (main: 24-40 s
building page objects): the sender gets a clear reply within a generous deadline, another chat is
answered meanwhile, and a document still being read when its deadline passes is stopped, the
customer told, nothing stored.

"Meanwhile" is made certain, not hoped for: the child process reading the document is paused
(SIGSTOP) while the other chat's question is asked and answered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import RedisServer
from tests.e2e.harness import RunningBot, make_settings, start_bot
from tests.e2e.test_media import media_bot, stored
from tests.e2e.waiting import eventually
from tests.hostile_pdfs import form_fan_out_pdf, many_pages_pdf
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram
from tests.unit.services.knowledge.test_document_budgets import sandbox_children

__all__ = ["media_bot"]  # the fixture, shared with test_media

CHAT, OTHER = 4242, 5151
DEADLINE = 60.0
"""Generous: the bounded work takes about a second; main took minutes."""


async def new_sandbox_child(before: set[int], within: float = DEADLINE) -> int:
    """The child process started to read the document (none on main: it parsed in a thread)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if found := sandbox_children() - before:
            return found.pop()
        await asyncio.sleep(0.005)
    raise AssertionError("no extraction child process was started")


@contextlib.asynccontextmanager
async def paused(pid: int) -> AsyncIterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed at its deadline
            os.kill(pid, signal.SIGCONT)


async def ask_other_chat(telegram: StubTelegram) -> str:
    telegram.send_text(OTHER, "Where is my order 7718?")
    [answer] = await telegram.wait_messages(OTHER, 1, within=DEADLINE)
    return answer


def chat_prompts(stub_llm: StubOpenAI) -> str:
    return json.dumps(stub_llm.chat_requests)


async def test_a_form_fan_out_pdf_is_refused_clearly_while_another_chat_is_answered(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    telegram.push(telegram.document_message(CHAT, form_fan_out_pdf(), caption="is this total right?"))
    answer = await ask_other_chat(telegram)
    assert "7718" in answer
    [reply] = await telegram.wait_messages(CHAT, 1, within=DEADLINE)
    assert "too complex for me to read" in reply  # main: "could not open" after 105 s
    assert await stored(media_bot) == []
    assert "is this total right?" not in chat_prompts(stub_llm)


async def test_a_pdf_of_100_000_pages_is_answered_from_its_first_pages_while_another_chat_is_answered(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    before = sandbox_children()
    telegram.push(
        telegram.document_message(CHAT, many_pages_pdf(), file_name="catalogue.pdf", caption="refund period?")
    )
    async with paused(await new_sandbox_child(before)):  # the document is being read: held there
        assert "7718" in await ask_other_chat(telegram)
        assert telegram.texts_to(CHAT) == []
    replies = await telegram.wait_messages(CHAT, 2, within=DEADLINE)
    assert any("only its first part" in reply for reply in replies)
    assert "Refunds are paid within 14 days" in chat_prompts(stub_llm)
    [user, _answer] = await stored(media_bot)
    assert user.startswith("[document catalogue.pdf, 100000 pages, only the first part was read]")


@pytest.mark.parametrize("media_bot", [{"document_timeout_seconds": 2}], indirect=True)
async def test_a_document_still_read_at_its_deadline_is_stopped_and_the_customer_told(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    before = sandbox_children()
    telegram.push(telegram.document_message(CHAT, many_pages_pdf(), file_name="catalogue.pdf", caption="refunds?"))
    child = await new_sandbox_child(before)
    async with paused(child):  # never resumed before its deadline: it cannot finish in time
        assert "7718" in await ask_other_chat(telegram)
        [reply] = await telegram.wait_messages(CHAT, 1, within=DEADLINE)
    assert "too complex for me to read" in reply
    assert child not in sandbox_children()  # killed and reaped
    assert await stored(media_bot) == []
    assert "refunds?" not in chat_prompts(stub_llm)


async def test_hostile_pdfs_in_the_knowledge_folder_are_skipped_or_read_within_their_budget(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Added while the bot runs: the form fan-out is skipped with one line naming it (main: 105 s of
    the refresh thread), the 100 000-page file indexed from its first 2000 pages; chats answered."""
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "returns.md").write_text("# Returns\n\n## Refunds\n\nRefunds are paid to the card within 14 days.\n")
    settings = make_settings(
        telegram.base_url,
        stub_llm.base_url,
        redis_server.url,
        knowledge={"knowledge_dir": str(folder), "knowledge_refresh_seconds": 0.2},
    )
    bot = await start_bot(settings)
    caplog.set_level(logging.WARNING)
    try:
        settled = time.time_ns() - 60 * 10**9  # whole and old: read once (corpus.RACY_NS), so logged once
        for name, data in (("fan.pdf", form_fan_out_pdf()), ("catalogue.pdf", many_pages_pdf())):
            (tmp_path / name).write_bytes(data)
            os.utime(tmp_path / name, ns=(settled, settled))
            (tmp_path / name).rename(folder / name)
        assert "7718" in await ask_other_chat(telegram)

        async def indexed() -> bool:
            knowledge = bot.knowledge
            assert knowledge is not None
            return [d.path for d in knowledge.documents] == ["catalogue.pdf", "returns.md"]

        await eventually(indexed, within=DEADLINE, what="the folder read again with the hostile files")
        assert bot.knowledge is not None
        [skipped] = bot.knowledge.current().skipped
        assert skipped.path == "fan.pdf" and "too complex" in skipped.reason
        lines = [r.getMessage() for r in caplog.records if "fan.pdf" in r.getMessage()]
        assert lines == [f"knowledge: skipped fan.pdf: {skipped.reason}"]
        telegram.send_text(CHAT, "When is a refund paid?")
        await telegram.wait_messages(CHAT, 1, within=DEADLINE)
    finally:
        await bot.stop()
