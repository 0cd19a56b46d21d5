"""Learned FAQ entries: the store contract (real redis-server and in-process), versions kept on an
edit, removal, the digest claimed once per day by concurrent posters; and the library that indexes
the entries beside the folder's documents after a refresh, cited as the support team's FAQ."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from services.backends.memory.faq import InMemoryLearnedFaq
from services.backends.redis.faq import RedisLearnedFaq
from services.core.errors import StoreUnavailableError
from services.core.knowledge import FAQ_SOURCE, DigestPost, KnowledgeQuery
from services.core.tokens import TokenCounter
from services.knowledge.library import KnowledgeLibrary
from services.ports.knowledge import LearnedFaq
from tests.conftest import TEST_KEYS, RedisServer


@pytest.fixture(params=["memory", "redis-server"])
async def faq(request: pytest.FixtureRequest) -> AsyncIterator[LearnedFaq]:
    if request.param == "memory":
        yield InMemoryLearnedFaq()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    client = Redis.from_url(server.url)
    await client.flushdb()
    yield RedisLearnedFaq(redis=client, keys=TEST_KEYS)
    await client.aclose()


async def test_entries_are_added_edited_as_versions_and_removed(faq: LearnedFaq) -> None:
    start = await faq.revision()
    first = await faq.add(("Можно ли оплатить картой Мир?",), "Да, картой Мир можно.", author="Olga")
    second = await faq.add(("Do you ship to Mars?",), "Not yet.", author="Ivan")
    assert first.id != second.id and first.version == 1
    edited = await faq.edit(first.id, ("Можно ли оплатить картой Мир?",), "Да, и по СБП тоже.", author="Ivan")
    assert edited is not None and edited.version == 2 and edited.id == first.id
    assert [(e.id, e.answer, e.version) for e in await faq.entries()] == [
        (first.id, "Да, и по СБП тоже.", 2),
        (second.id, "Not yet.", 1),
    ]
    history = await faq.history(first.id)
    assert [(e.answer, e.author, e.version) for e in history] == [
        ("Да, картой Мир можно.", "Olga", 1),
        ("Да, и по СБП тоже.", "Ivan", 2),
    ]
    assert await faq.remove(second.id) and not await faq.remove(second.id)
    assert await faq.edit(second.id, ("x",), "y", author="z") is None, "a removed entry is not edited"
    assert [e.id for e in await faq.entries()] == [first.id]
    assert [e.answer for e in await faq.history(second.id)] == ["Not yet."], "its versions stay"
    assert await faq.revision() == start + 4
    third = await faq.add(("Again?",), "Yes.", author="Olga")
    assert third.id not in (first.id, second.id), "a removed entry's id is never handed out again"


async def test_an_update_redelivered_makes_no_second_entry(faq: LearnedFaq) -> None:
    made = await faq.add(("Do you sell gift cards?",), "Yes.", author="Olga", key="u41")
    again = await asyncio.gather(
        *(faq.add(("Do you sell gift cards?",), "Yes.", author="Olga", key="u41") for _ in range(3))
    )
    assert {e.id for e in again} == {made.id} and len(await faq.entries()) == 1
    revision = await faq.revision()
    await faq.remove(made.id)
    assert (await faq.add(("x?",), "y", author="Olga", key="u41")).answer == "Yes.", "removed since: not made again"
    assert await faq.entries() == [] and await faq.revision() == revision + 1
    other = await faq.add(("Do you sell gift cards?",), "Yes.", author="Olga", key="u42")
    assert other.id != made.id


async def test_the_digest_is_claimed_once_per_day_by_concurrent_posters(faq: LearnedFaq) -> None:
    claims = await asyncio.gather(*(faq.claim_digest("2026-12-05") for _ in range(8)))
    assert sum(claims) == 1
    assert await faq.claim_digest("2026-12-06")
    await faq.remember_post(1001, DigestPost(("где мой заказ?", "где заказ"), 7))
    assert await faq.post(1001) == DigestPost(("где мой заказ?", "где заказ"), 7)
    assert await faq.post(1002) is None


async def test_the_library_indexes_the_entries_after_a_refresh_and_cites_the_team(
    tmp_path: Path, counter: TokenCounter
) -> None:
    document = tmp_path / "returns.md"
    document.write_text("# Returns\n\nRefunds are paid to the original card within 14 days.\n")
    os.utime(document, (1_700_000_000, 1_700_000_000))  # not "just written" (those are read again)
    faq = InMemoryLearnedFaq()
    library = KnowledgeLibrary(
        root=tmp_path,
        counter=counter,
        passage_tokens=220,
        max_file_bytes=1 << 20,
        min_score=0.1,
        refresh_seconds=60,
        learned=faq,
    )
    library.load()
    question = KnowledgeQuery("можно ли оплатить картой мир?")
    assert not (await library.current().search(question, limit=3)).matched
    answer = "Да, картой Мир можно оплатить любой заказ."
    entry = await faq.add(("Можно ли оплатить картой Мир?",), answer, author="Olga")
    assert await library.refresh(), "a new entry rebuilds the index"
    found = (await library.current().search(question, limit=3)).passages
    assert found and found[0].passage.source == FAQ_SOURCE and "картой Мир можно" in found[0].passage.text
    assert not await library.refresh(), "nothing changed: nothing rebuilt"
    refund = (await library.current().search(KnowledgeQuery("when are refunds paid?"), limit=3)).passages
    assert refund and refund[0].passage.document == "returns.md", "the documents stay searchable"
    await faq.remove(entry.id)
    assert await library.refresh()
    assert not (await library.current().search(question, limit=3)).matched, "a removed entry is no longer found"


class Unreachable(InMemoryLearnedFaq):
    down = False

    async def revision(self) -> int:
        if self.down:
            raise StoreUnavailableError("redis is down")
        return await super().revision()


async def test_an_unreachable_store_keeps_the_entries_in_use(
    tmp_path: Path, counter: TokenCounter, caplog: pytest.LogCaptureFixture
) -> None:
    document = tmp_path / "returns.md"
    document.write_text("# Returns\n\nRefunds are paid to the original card within 14 days.\n")
    os.utime(document, (1_700_000_000, 1_700_000_000))
    faq = Unreachable()
    library = KnowledgeLibrary(
        root=tmp_path, counter=counter, passage_tokens=220, max_file_bytes=1 << 20, min_score=0.1,
        refresh_seconds=60, learned=faq,
    )  # fmt: skip
    library.load()
    await faq.add(("Do you sell gift cards?",), "Yes, from 10 to 500 EUR.", author="Olga")
    assert await library.refresh()
    faq.down = True
    assert not await library.refresh()
    assert "learned FAQ entries are unavailable" in caplog.text
    found = (await library.current().search(KnowledgeQuery("do you sell gift cards?"), limit=3)).passages
    assert found and found[0].passage.source == FAQ_SOURCE


async def test_a_removed_entry_goes_while_the_folder_has_a_fault(tmp_path: Path, counter: TokenCounter) -> None:
    """/faq remove takes a wrong answer back even while KNOWLEDGE_DIR is empty (unmounted): the last good
    documents stay, the learned entries are indexed again with them."""
    folder = tmp_path / "kb"
    folder.mkdir()
    document = folder / "returns.md"
    document.write_text("# Returns\n\nRefunds are paid to the original card within 14 days.\n")
    os.utime(document, (1_700_000_000, 1_700_000_000))
    faq = InMemoryLearnedFaq()
    library = KnowledgeLibrary(
        root=folder, counter=counter, passage_tokens=220, max_file_bytes=1 << 20, min_score=0.1,
        refresh_seconds=60, learned=faq,
    )  # fmt: skip
    library.load()
    question = KnowledgeQuery("можно ли оплатить картой мир?")
    wrong = await faq.add(("Можно ли оплатить картой Мир?",), "Нет, только наличными.", author="Olga")
    assert await library.refresh()
    assert (await library.current().search(question, limit=3)).matched
    document.unlink()  # the volume is unmounted: the folder is empty (a fault; the last index stays)
    assert not await library.refresh(), "the fault alone rebuilds nothing"
    await faq.remove(wrong.id)
    assert await library.refresh()
    assert not (await library.current().search(question, limit=3)).matched, "the removed entry is still cited"
    refund = (await library.current().search(KnowledgeQuery("when are refunds paid?"), limit=3)).passages
    assert refund and refund[0].passage.document == "returns.md", "the last good documents stay"
    added = await faq.add(("Do you sell gift cards?",), "Yes, from 10 to 500 EUR.", author="Olga")
    assert await library.refresh() and added.id
    assert (await library.current().search(KnowledgeQuery("do you sell gift cards?"), limit=3)).matched
