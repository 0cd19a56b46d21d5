"""Why did it answer that? ``python -m bot chat show CHAT_ID`` against a real redis-server: the
summary, every stored turn, the passages (document › heading) each reply's prompt carried and the
media the customer sent, with the photo's note; records older than passage ids still show."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.cli.chats import GONE, show
from services.backends.redis.keys import KeySpace
from services.backends.redis.store import RedisSessionStore
from services.core.records import NewMessage
from services.core.tokens import TokenCounter
from services.engine.grounding import Grounding
from services.knowledge.library import KnowledgeLibrary
from services.llm.client import LLMClient
from tests.conftest import RedisServer
from tests.helpers import make_notes, make_service
from tests.stubs.openai_server import StubOpenAI
from tests.unit.bot.cli.test_cli import run_bot
from tests.unit.services.media.test_media_turns import noop, photo, with_photos

KEYS = KeySpace("t", "123456")
TOKEN = "123456:AAH-chat-show-test-token-0123456789ab"


def knowledge(root: Path, counter: TokenCounter) -> KnowledgeLibrary:
    root.mkdir()
    (root / "returns.md").write_text(
        "# Returns\n\n## Refunds\n\nRefunds are paid to the original card within 14 days.\n\n"
        "## Damaged goods\n\nA damaged item is replaced free of charge; send a photo of the damage.\n"
    )
    built = KnowledgeLibrary(
        root=root, counter=counter, passage_tokens=100, max_file_bytes=10**6, min_score=0.2, refresh_seconds=60
    )
    built.load()
    return built


async def a_chat_with_passages_and_a_photo(
    store: RedisSessionStore, library: KnowledgeLibrary, stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    stub_llm.image_note = lambda _image: "a monitor stand cracked at the base"
    grounding = Grounding(source=library, counter=counter, role="system", budget=400, top_k=4)
    chat = make_service(
        store=store, llm=llm, counter=counter, budget=3000, grounding=grounding, notes=make_notes(llm, counter)
    )
    await chat.handle(42, "When are refunds paid to my card?", deliver=noop)
    await chat.handle(42, "My item arrived damaged, what now?", deliver=noop, media=with_photos(photo()))


async def test_chat_show_prints_each_turns_passages_and_media(
    real_redis: Redis, tmp_path: Path, stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    store = RedisSessionStore(redis=real_redis, keys=KEYS)
    library = knowledge(tmp_path / "docs", counter)
    await a_chat_with_passages_and_a_photo(store, library, stub_llm, llm, counter)
    out = io.StringIO()
    assert await show(store, 42, library=library, out=out) == 0
    text = out.getvalue()
    assert text.startswith("chat 42: version 2, 4 stored message(s)")
    assert "summary: none" in text
    [first_reply, second_reply] = text.split("#1 bot")[1].split("#3 bot")
    assert "returns.md › Returns › Refunds" in first_reply
    assert "returns.md › Returns › Damaged goods" in second_reply
    assert "[photo: a monitor stand cracked at the base]" in text and "sent: photo (file_id file-uq1)" in text

    (tmp_path / "docs" / "returns.md").write_text("# Returns\n\nRewritten since.\n")
    assert await library.refresh() is True
    out = io.StringIO()
    await show(store, 42, library=library, out=out)
    assert GONE in out.getvalue(), "a passage edited away is named by its id, not dropped"


async def test_a_record_without_passage_ids_still_shows(real_redis: Redis) -> None:
    """A turn stored before passage ids (no ``k`` or ``m`` in its JSON) loads and shows."""
    store = RedisSessionStore(redis=real_redis, keys=KEYS)
    await store.commit_turn(
        7, expected_version=0, messages=[NewMessage("user", "hi", 5), NewMessage("assistant", "hello", 5)]
    )
    assert '"k"' not in str(await real_redis.lrange(KEYS.chat(7).msgs, 0, -1))
    out = io.StringIO()
    assert await show(store, 7, out=out) == 0
    assert "#1 bot (5 tokens)\n    hello\n" in out.getvalue()
    assert await show(store, 8, out=io.StringIO()) == 1


@pytest.mark.slow  # a new interpreter
async def test_the_command_reads_redis_or_says_where_the_sessions_are(
    real_redis: Redis,
    redis_server: RedisServer,
    tmp_path: Path,
    stub_llm: StubOpenAI,
    llm: LLMClient,
    counter: TokenCounter,
) -> None:
    store = RedisSessionStore(redis=real_redis, keys=KEYS)
    library = knowledge(tmp_path / "docs", counter)
    await a_chat_with_passages_and_a_photo(store, library, stub_llm, llm, counter)
    env = {"BOT_TOKEN": TOKEN, "REDIS_KEY_PREFIX": "t", "KNOWLEDGE_DIR": str(tmp_path / "docs")}
    code, out, err = await run_bot(["chat", "show", "42"], tmp_path, REDIS_URL=redis_server.url, env=env)
    assert code == 0, err
    assert "returns.md › Returns › Damaged goods" in out and "[photo: a monitor stand cracked at the base]" in out
    assert TOKEN.split(":")[1] not in out + err

    code, out, err = await run_bot(["chat", "show", "42"], tmp_path, env=env)
    assert code == 2 and "REDIS_URL is unset: the sessions live only in the running bot's process" in err
