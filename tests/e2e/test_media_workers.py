"""A voice note in queued mode through a SIGKILL: three real ``python -m bot`` webhook workers on one
real redis-server, the stub Bot API (the voice file) and the stub model server (/audio/transcriptions,
chat). The worker serving the chat is killed while the transcription hangs, or after the transcript came
back while the model's answer is held; another worker takes the chat over once the lease expires. The
customer gets one answer to the voice note, then the one to the text sent after it; the history has
the transcript once, in order; a transcript that came back is paid for once (the memo is used).

The workers are started once for the module (each case kills one of the three): a worker's start is a
whole interpreter start, the bulk of these tests' time."""

from __future__ import annotations

import asyncio
import signal
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from services.backends.redis.store import RedisSessionStore
from tests.conftest import RedisServer
from tests.e2e.processes import BotProcess, start_webhook_workers
from tests.e2e.test_faults import KEYS, LEASE, post, worker_env
from tests.e2e.waiting import eventually
from tests.stubs.openai_server import StubOpenAI, echo_reply
from tests.stubs.telegram_server import StubTelegram
from tests.stubs.transcriptions import TranscriptionCall

pytestmark = pytest.mark.asyncio(loop_scope="module")
FOLLOW_UP = "Is there any news?"


@dataclass(repr=False)
class Workers:
    telegram: StubTelegram
    llm: StubOpenAI
    redis: Redis
    processes: list[BotProcess]
    urls: list[str]

    def live_url(self) -> str:
        """The webhook of a worker still running (any one takes the update into the chat's queue)."""
        return next(url for p, url in zip(self.processes, self.urls, strict=True) if alive(p))


def alive(process: BotProcess) -> bool:
    return process.process is not None and process.process.returncode is None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def workers(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Workers]:
    telegram, llm, redis = StubTelegram(), StubOpenAI(), Redis.from_url(redis_server.url)
    processes: list[BotProcess] = []
    await telegram.start()
    await llm.start()
    try:
        await redis.flushdb()
        env = worker_env(telegram, llm, redis_server.url, DRAFTS_ENABLED="false")
        urls = await start_webhook_workers(env, tmp_path_factory.mktemp("media-workers"), processes, 3)
        yield Workers(telegram, llm, redis, processes, urls)
    finally:
        for process in processes:
            if process.process is not None and process.process.returncode is None:
                process.process.kill()
                await process.process.wait()
        await llm.stop()
        await telegram.stop()
        await redis.aclose()


@dataclass(frozen=True)
class Case:
    chat: int
    audio: bytes
    spoken: str

    @property
    def heard(self) -> str:
        return f"[voice message, transcribed]: {self.spoken}"

    def answers(self) -> list[str]:
        """The stub's echo of each customer message, in order: the voice note's, then the text's."""
        return [echo_reply(asking(self.heard)), echo_reply(asking(FOLLOW_UP))]


def asking(text: str) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": f"<customer_message>\n{text}\n</customer_message>"}]}


async def send_voice_then_text(w: Workers, case: Case) -> None:
    w.llm.transcriptions.texts[case.audio] = case.spoken
    assert await post(w.live_url(), w.telegram.voice_message(case.chat, case.audio, duration=4)) == 200
    assert await post(w.live_url(), w.telegram.message_update(case.chat, FOLLOW_UP)) == 200


def transcriptions(w: Workers, case: Case) -> list[TranscriptionCall]:
    return [call for call in w.llm.transcriptions.calls if call.file == case.audio]


def model_calls_about(w: Workers, case: Case) -> list[dict[str, object]]:
    return [r for r in w.llm.chat_requests if case.spoken in str(r["messages"])]


async def kill_the_holder(w: Workers, chat: int) -> BotProcess:
    """SIGKILL the worker whose token is the chat's lease (it is serving the chat now)."""
    holder = await w.redis.get(KEYS.chat(chat).lease)
    assert isinstance(holder, bytes), "the chat is being served"
    victim = next(p for p in w.processes if p.process is not None and f":{p.process.pid}:" in holder.decode())
    assert victim.process is not None
    victim.process.send_signal(signal.SIGKILL)
    assert await victim.process.wait() == -signal.SIGKILL
    assert any(alive(p) for p in w.processes), "a worker is left to take the chat over"
    return victim


async def answered_once_in_order(w: Workers, case: Case) -> None:
    """Both answers, in order, each once; the history holds the transcript once, each turn once."""
    keys = KEYS.chat(case.chat)

    async def settled() -> bool:  # both replies recorded as sent, nothing left in the chat's queue
        return await w.redis.zcard(keys.replied) == 2 and await w.redis.zcard(keys.inbox) == 0

    await w.telegram.wait_messages(case.chat, 2, within=10 + 4 * LEASE)
    await eventually(settled, within=10, what="both turns recorded as answered")
    answers = case.answers()
    assert w.telegram.texts_to(case.chat) == answers
    session = await RedisSessionStore(redis=w.redis, keys=KEYS).load(case.chat)
    assert [(m.role, m.content) for m in session.messages] == [
        ("user", case.heard),
        ("assistant", answers[0]),
        ("user", FOLLOW_UP),
        ("assistant", answers[1]),
    ]
    logs = b"".join(p.log for p in w.processes).decode(errors="replace")
    assert "ERROR" not in logs and "Traceback" not in logs, logs


async def test_a_worker_killed_while_transcribing_is_taken_over_and_answered_once(workers: Workers) -> None:
    """The first transcription never answers: its worker dies with it, nothing was paid for and no memo
    kept; the next worker transcribes again (paid once) and answers both messages in order."""
    case = Case(8101, b"OggS\x00killed-while-transcribing", "My order 7718 has not arrived.")
    workers.llm.transcriptions.outcomes = deque(["hang"])
    try:
        await send_voice_then_text(workers, case)

        async def transcribing() -> bool:
            return len(transcriptions(workers, case)) == 1

        await eventually(transcribing, within=20, what="the first transcription call")
        await kill_the_holder(workers, case.chat)
        await answered_once_in_order(workers, case)
    finally:
        workers.llm.transcriptions.outcomes.clear()
    assert [call.outcome for call in transcriptions(workers, case)] == ["hang", "ok"]
    assert len([call for call in workers.llm.transcriptions.paid if call.file == case.audio]) == 1
    assert len(model_calls_about(workers, case)) == 2, "the voice note's turn asked once, the text's once"


async def test_a_worker_killed_after_the_transcript_came_back_is_taken_over_without_paying_again(
    workers: Workers,
) -> None:
    """The transcript came back (and was kept) and the model's answer is held when the worker dies: the
    next worker reads the transcript from the memo, so the provider is paid for it once."""
    case = Case(8102, b"OggS\x00killed-while-answering", "The parcel came open, two cups broken.")
    gate = workers.llm.gate = asyncio.Event()
    try:
        await send_voice_then_text(workers, case)

        async def asking_the_model() -> bool:
            return len(model_calls_about(workers, case)) == 1

        await eventually(asking_the_model, within=20, what="the model asked about the voice note")
        await kill_the_holder(workers, case.chat)
    finally:
        gate.set()  # the dead worker's request is answered to no one; the next ones are not held
        workers.llm.gate = None
    await answered_once_in_order(workers, case)
    assert len(transcriptions(workers, case)) == 1
    assert len([call for call in workers.llm.transcriptions.paid if call.file == case.audio]) == 1
    assert len(model_calls_about(workers, case)) == 3, "the voice note asked twice (killed, taken over), the text once"
