"""Unanswered questions become answers, across worker processes: two real ``python -m bot`` webhook
workers on one real redis-server, the stub Bot API and the stub model server, OPERATOR_CHAT_ID set,
GAPS_DIGEST_HOUR=0 (due at once) and KNOWLEDGE_REFRESH_SECONDS=1. The day's digest of the recorded
gaps is posted once across the two; an operator's reply to one of its groups becomes a learned FAQ
entry that every worker's index holds and a customer's answer cites as the support team's FAQ; and
``/faq remove`` takes it back out of every worker's index."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from services.backends.redis.gaps import RedisKnowledgeGaps
from services.core.knowledge import FAQ_SOURCE
from services.engine.grounding import NO_KNOWLEDGE
from tests.conftest import RedisServer
from tests.e2e.harness import TOKEN
from tests.e2e.processes import BotProcess, start_webhook_workers
from tests.e2e.test_faults import KEYS, post, worker_env
from tests.e2e.test_knowledge import RETURNS, cite_first, knowledge_part
from tests.e2e.waiting import eventually
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

GROUP = -1002223334445
BOT = {"id": int(TOKEN.split(":")[0]), "is_bot": True, "first_name": "Support"}
LEARNED = re.compile(rb"knowledge: index \w+: \d+ documents, \d+ passages \((\d+) of learned FAQ entries\)")
BITCOIN = "Can I pay with bitcoin?"


def learned_in(process: BotProcess) -> int | None:
    """The learned FAQ passages of the last index this worker logged (None: none logged yet)."""
    found = LEARNED.findall(process.log)
    return int(found[-1]) if found else None


def reply_to(message_id: int) -> dict[str, Any]:
    chat = {"id": GROUP, "type": "supergroup", "title": "Ops", "is_forum": True}
    return {"message_id": message_id, "date": 0, "chat": chat, "from": BOT, "text": "❓"}


async def every_worker_learned(processes: list[BotProcess], count: int, what: str) -> None:
    async def learned() -> bool:
        return all((learned_in(p) or 0) == count for p in processes)

    await eventually(learned, within=60, what=what)


async def ask(telegram: StubTelegram, stub_llm: StubOpenAI, urls: list[str], first_chat: int) -> list[str]:
    """Asks BITCOIN once through each worker's webhook; the knowledge part of each prompt."""
    parts = []
    for n, url in enumerate(urls):
        chat = first_chat + n
        assert await post(url, telegram.message_update(chat, BITCOIN)) == 200
        await telegram.wait_messages(chat, 1, within=30)
        asked = [r for r in stub_llm.chat_requests if BITCOIN in str(r["messages"][-1]["content"])]
        parts.append(knowledge_part(asked[-1]))
    return parts


async def test_the_digest_once_a_reply_becomes_an_entry_every_worker_cites_and_remove_takes_it_back(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "returns.md").write_text(RETURNS)
    gaps = RedisKnowledgeGaps(redis=real_redis, keys=KEYS)
    asked = [BITCOIN, "can i pay with bitcoin", "Can I pay with Bitcoin?", "is gift wrapping free?"]
    for chat, question in enumerate(asked):
        await gaps.record(100 + chat, question)
    stub_llm.chat_reply = cite_first
    env = worker_env(
        telegram,
        stub_llm,
        redis_server.url,
        LOG_LEVEL="INFO",
        DRAFTS_ENABLED="false",
        METRICS_PORT="0",
        OPERATOR_CHAT_ID=str(GROUP),
        GAPS_DIGEST_HOUR="0",
        KNOWLEDGE_DIR=str(folder),
        KNOWLEDGE_REFRESH_SECONDS="1",
    )
    urls = await start_webhook_workers(env, tmp_path, processes, 2)

    # a. the digest: posted by one worker, the other saw it claimed (its log says so)
    async def both_looked() -> bool:
        return all(b"gaps digest " in p.log for p in processes)

    await eventually(both_looked, within=60, what="both workers' look at the day's digest")
    posted = telegram.texts_to(GROUP)
    assert len(posted) == 3, posted
    assert posted[1].startswith("❓ asked 3×: can i pay with bitcoin") and "is gift wrapping free?" in posted[2]
    assert sum(b"groups posted to the operators' group" in p.log for p in processes) == 1
    assert sum(b"posted already" in p.log for p in processes) == 1
    pattern = f"{{{KEYS.namespace}:faq}}:post:*"
    posts = {int(k.decode().rsplit(":", 1)[1]): await real_redis.get(k) async for k in real_redis.scan_iter(pattern)}
    [bitcoin_group] = [m for m, raw in posts.items() if b"bitcoin" in (raw or b"")]
    assert len(posts) == 2, "each group's message is remembered for the operators' replies"

    # b. an operator answers the group by replying to it: every worker's index holds the entry
    answer = telegram.operator_update(GROUP, None, "Not yet: cards and PayPal only.")
    answer["message"]["reply_to_message"] = reply_to(bitcoin_group)
    assert await post(urls[0], answer) == 200
    saved = await telegram.wait_messages(GROUP, 4, within=30)
    assert saved[-1].startswith("Saved as FAQ #1"), saved
    await every_worker_learned(processes, 1, "the new entry in both workers' index")
    for part in await ask(telegram, stub_llm, urls, 700):
        assert part.startswith(f'<knowledge source="{FAQ_SOURCE}" ref="K1">') and "cards and PayPal only" in part
    cited = telegram.texts_to(700)[-1]
    assert f"[1] {FAQ_SOURCE}" in cited, cited

    # c. /faq remove takes it back out of every worker's index
    assert await post(urls[1], telegram.operator_update(GROUP, None, "/faq remove 1")) == 200
    removed = await telegram.wait_messages(GROUP, 5, within=30)
    assert removed[-1].startswith("FAQ #1 removed"), removed
    await every_worker_learned(processes, 0, "the entry gone from both workers' index")
    assert await ask(telegram, stub_llm, urls, 710) == [NO_KNOWLEDGE, NO_KNOWLEDGE]
