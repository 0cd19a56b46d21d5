"""The feedback question end to end: three ``python -m bot`` workers (polling) on one real
redis-server, the stub Bot API and model. Conversations go quiet (FEEDBACK_AFTER_SECONDS=2) and one
worker is SIGKILLed the moment the first is due: each still gets exactly one question. A "No" offers a
person, the person's handoff ends without a second question, a second press does nothing new,
``python -m bot report`` counts it all, and /forget removes the chat's feedback and conversation
records. One module, one set of processes; and once in-process (no Redis)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from redis.asyncio import Redis

from bot.serving.feedback import watch_feedback
from bot.telegram.texts import TEXTS
from services.backends.redis.keys import KeySpace
from tests.conftest import RedisServer
from tests.e2e.harness import make_settings, start_bot
from tests.e2e.processes import BotProcess, base_env
from tests.e2e.test_handoff import GROUP
from tests.e2e.test_handoff_queued import topic_of
from tests.e2e.waiting import eventually
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

KEYS = KeySpace("sb", "123456")
CHATS = [778001, 778002, 778003]
EN = TEXTS["en"]


def questions_to(telegram: StubTelegram, chat: int) -> list[list[str]]:
    return [b for b in telegram.buttons_to(chat) if b and b[0].endswith(":yes")]


async def redis_ms(real_redis: Redis) -> int:
    seconds, micros = await real_redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def kill_one_when_due(real_redis: Redis, processes: list[BotProcess]) -> BotProcess:
    """SIGKILL a worker the moment the first question falls due (on the Redis clock the workers read)."""
    scored: list[tuple[bytes, float]] = []

    async def scheduled() -> bool:
        scored[:] = await real_redis.zrange(KEYS.feedback_due, 0, 0, withscores=True)
        return bool(scored)

    await eventually(scheduled, within=120, what="the first answer's question scheduled")
    await asyncio.sleep(max(0.0, (int(scored[0][1]) - await redis_ms(real_redis)) / 1000))
    victim = processes[0]
    assert victim.process is not None
    victim.process.send_signal(signal.SIGKILL)
    await victim.process.wait()
    return victim


async def settled(real_redis: Redis) -> bool:
    """Every question asked and nothing about them left to do (schedule and inboxes empty)."""
    if await real_redis.zcard(KEYS.feedback_due):
        return False
    for chat in CHATS:
        if await real_redis.hget(KEYS.chat(chat).quality, "ask") != b"asked":
            return False
        if await real_redis.zcard(KEYS.chat(chat).inbox):
            return False
    return True


async def test_one_question_per_conversation_through_a_sigkill_then_no_person_report_forget(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
    shown: Callable[[str], None],
) -> None:
    env = base_env(telegram, stub_llm) | {
        "BOT_MODE": "polling",
        "REDIS_URL": redis_server.url,
        "POLLING_TIMEOUT_SECONDS": "1",
        "WORKER_LEASE_SECONDS": "2",
        "WORKER_IDLE_WAIT_SECONDS": "0.2",
        "LOG_LEVEL": "INFO",
        "OPERATOR_CHAT_ID": str(GROUP),
        "HANDOFF_REPLY_TIMEOUT_SECONDS": "3600",
        "FEEDBACK_AFTER_SECONDS": "2",
    }
    for _ in range(3):
        processes.append(BotProcess(env, tmp_path))
    await asyncio.gather(*(p.start() for p in processes))
    for chat in CHATS:
        telegram.send_text(chat, "My monitor stand is cracked, order 7718.")
    await kill_one_when_due(real_redis, processes)
    for chat in CHATS:
        await telegram.wait_for(lambda c=chat: bool(questions_to(telegram, c)), within=60)
    await eventually(lambda: settled(real_redis), within=30, what="every question asked and recorded")
    asked = {chat: len(questions_to(telegram, chat)) for chat in CHATS}
    logs = "".join(p.log.decode(errors="replace") for p in processes)
    shown(f"\nfeedback, 3 workers, one SIGKILLed when the first was due: questions per chat {asked}")
    assert asked == dict.fromkeys(CHATS, 1), logs
    assert all(EN["feedback_question"] in telegram.texts_to(chat) for chat in CHATS)

    chat = CHATS[0]
    (yes, no) = questions_to(telegram, chat)[0]
    telegram.press(chat, no)
    await telegram.wait_for(lambda: EN["feedback_sorry_person"] in telegram.texts_to(chat), within=30)
    person = telegram.buttons_to(chat)[-1]
    assert person == [no.replace(":no", ":person")]
    sent = len(telegram.texts_to(chat))
    telegram.press(chat, yes)  # a second press: answered, nothing new said or counted
    await telegram.wait_for(lambda: len(telegram.of("answerCallbackQuery")) >= 2, within=30)
    telegram.press(chat, person[0])
    await telegram.wait_for(lambda: EN["handoff_started"] in telegram.texts_to(chat), within=30)
    assert len(telegram.texts_to(chat)) == sent + 1, telegram.texts_to(chat)
    thread = topic_of(telegram, chat)
    assert thread is not None
    telegram.push(telegram.operator_update(GROUP, thread, "/close"))
    await telegram.wait_for(lambda: EN["handoff_closed"] in telegram.texts_to(chat), within=30)
    telegram.press(CHATS[1], questions_to(telegram, CHATS[1])[0][0])  # Yes
    await telegram.wait_for(lambda: EN["feedback_thanks"] in telegram.texts_to(CHATS[1]), within=30)
    await eventually(lambda: settled(real_redis), within=30, what="nothing more to ask")
    assert len(questions_to(telegram, chat)) == 1, "never twice in one conversation, not after its handoff"

    report = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bot", "report", "--days", "1"],
        cwd=tmp_path,
        env=processes[1].env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stdout + report.stderr
    for line in (
        "conversations           3 (",
        "resolved by the bot     2 of 3 conversations (67 %)",  # the one rated No (and handed off) is not
        "handed off              1 of 3 conversations (33 %)",
        "feedback asked          3 of 3 conversations (100 %)",
        "rated yes               1 of 2 ratings (50 %)",
        "feedback response rate  2 of 3 questions asked (67 %)",
    ):
        assert line in report.stdout, report.stdout

    telegram.send_text(chat, "/forget")
    await telegram.wait_for(lambda: TEXTS["en"]["forget_done"] in telegram.texts_to(chat), within=30)
    assert not await real_redis.exists(KEYS.chat(chat).quality)
    members = [m.decode() for m in await real_redis.zrange(KEYS.conversations, 0, -1)]
    assert members and not any(m.startswith(f"{chat}:") for m in members), members
    assert await real_redis.zscore(KEYS.feedback_due, str(chat)) is None


async def test_in_process_the_question_is_asked_once_and_a_yes_is_thanked(
    telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    """No Redis: the in-process backend and its own asking task; not in groups; a second press and a
    message after the question change nothing."""
    settings = make_settings(telegram.base_url, stub_llm.base_url, None, bot={"feedback_after_seconds": 1})
    running = await start_bot(settings)
    feedback = running.dispatcher["desk"].feedback
    assert feedback is not None

    async def ask(chat: int, _due_ms: int) -> None:
        await feedback.ask(running.bot, chat, None)

    watcher = asyncio.create_task(watch_feedback(feedback.conversations, ask, hold=5, every=0.1))
    try:
        telegram.send_text(-4242, "@support_test_bot where is my order?", chat_type="group")
        telegram.send_text(4242, "Where is my order 7718?", language="ru")
        await telegram.wait_for(lambda: bool(questions_to(telegram, 4242)), within=30)
        assert TEXTS["ru"]["feedback_question"] in telegram.texts_to(4242)
        yes = questions_to(telegram, 4242)[0][0]
        telegram.press(4242, yes, language="ru")
        await telegram.wait_for(lambda: TEXTS["ru"]["feedback_thanks"] in telegram.texts_to(4242), within=30)
        telegram.press(4242, yes, language="ru")
        telegram.send_text(4242, "And when does it arrive?", language="ru")
        await telegram.wait_messages(4242, 4, within=30)
        await asyncio.sleep(1.5)  # past FEEDBACK_AFTER_SECONDS: nothing more is asked in this conversation
        assert len(questions_to(telegram, 4242)) == 1 and questions_to(telegram, -4242) == []
        assert telegram.texts_to(4242).count(TEXTS["ru"]["feedback_thanks"]) == 1
        (record,) = [r for r in await feedback.conversations.conversations(0) if r.chat_id == 4242]
        assert (record.rating, record.messages, record.resolved) == ("yes", 2, True)
    finally:
        watcher.cancel()
        await running.stop()
