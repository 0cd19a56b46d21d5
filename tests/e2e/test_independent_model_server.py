"""The bot against an independent, fault-injecting OpenAI API emulator (LLMock, a separate process):
the real bot in-process, real AsyncOpenAI, the stub Bot API with a real aiogram Bot, real redis-server.
A guarantee proven only against our own stub is not proven: each fault here is LLMock's, not ours
(issue 26): a stream cut short without a finish reason, a corrupted chunk, a dropped connection, 429
with Retry-After, 500, 401. Each checks what the customer sees, what is stored, and what LLMock saw;
the last test does it in queued mode (one worker process: retries across attempts, the promise kept)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from redis.asyncio import Redis

from bot.settings import Settings
from bot.telegram.texts import TEXTS
from services.backends.redis.keys import KeySpace
from services.backends.redis.store import RedisSessionStore
from services.settings import LLMSettings
from tests.conftest import RedisServer
from tests.e2e.harness import TOKEN, RunningBot, make_settings, start_bot
from tests.e2e.model_emulator import ModelEmulator
from tests.e2e.processes import BotProcess
from tests.stubs.telegram_server import StubTelegram

CHAT = 26001
ANSWER = "The refund for order 7718 was approved and reaches your card within five working days."
RETRIES = 2
"""OPENAI_MAX_RETRIES: the bot's own retries within one call (the SDK's are off)."""
IN_CALL_MAX_WAIT = 2.0
"""LLM_RETRY_IN_CALL_MAX_WAIT_SECONDS: a longer Retry-After is not slept inside the call."""
UNAVAILABLE = "temporarily unavailable"
"""In every text that tells the customer the model is out of reach (llm_unavailable, llm_retrying, and
the "service is down" text an operator-visible outage gets): matched loosely, the wording is not ours."""


@pytest.fixture(scope="session")
def model_emulator() -> Iterator[ModelEmulator]:
    emulator = ModelEmulator()
    emulator.start()
    yield emulator
    emulator.stop()


@pytest.fixture
async def emulator(model_emulator: ModelEmulator) -> ModelEmulator:
    await model_emulator.reset()
    return model_emulator


def settings_for(telegram: StubTelegram, emulator: ModelEmulator, redis_url: str, *, stream: bool) -> Settings:
    """Drafts on: the reply is streamed; off: one plain completion. The retry settings of issue 26 are
    given by name (pydantic-settings ignores names it does not know: on older code they do nothing)."""
    base = make_settings(telegram.base_url, emulator.base_url, redis_url, bot={"drafts_enabled": stream})
    llm = LLMSettings(
        _env_file=None,
        openai_api_key="sk-emulated",
        openai_base_url=emulator.base_url,  # type: ignore[call-arg]
        openai_model="emulated-chat",
        openai_instruction_role="system",
        openai_timeout_seconds=5,
        openai_max_retries=RETRIES,
        llm_retry_base_seconds=0.05,
        llm_retry_max_seconds=0.2,
        llm_retry_in_call_max_wait_seconds=IN_CALL_MAX_WAIT,
    )
    return dataclasses.replace(base, llm=llm)


@contextlib.asynccontextmanager
async def bot_on(
    telegram: StubTelegram, emulator: ModelEmulator, redis_server: RedisServer, *, stream: bool
) -> AsyncIterator[RunningBot]:
    """The real bot in this process, on a flushed redis-server, asking the emulator."""
    client = Redis.from_url(redis_server.url)
    await client.flushdb()
    await client.aclose()
    bot = await start_bot(settings_for(telegram, emulator, redis_server.url, stream=stream))
    try:
        yield bot
    finally:
        await bot.stop()


@pytest.fixture(params=["streamed", "plain"])
async def running(
    request: pytest.FixtureRequest, telegram: StubTelegram, emulator: ModelEmulator, redis_server: RedisServer
) -> AsyncIterator[RunningBot]:
    async with bot_on(telegram, emulator, redis_server, stream=request.param == "streamed") as bot:
        yield bot


@pytest.fixture
async def streamed(
    telegram: StubTelegram, emulator: ModelEmulator, redis_server: RedisServer
) -> AsyncIterator[RunningBot]:
    """Stream faults need a streamed reply."""
    async with bot_on(telegram, emulator, redis_server, stream=True) as bot:
        yield bot


def reply(text: str = ANSWER, times: int = 1) -> dict[str, Any]:
    return {"type": "reply", "text": text, "times": times}


def stream_fault(kind: str, *, after_chunks: int = 3, times: int | None = None) -> dict[str, Any]:
    return {"type": "stream_fault", "kind": kind, "after_chunks": after_chunks, "times": times}


def fail(status: int, *, times: int | None = None, retry_after: float | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"type": "fail", "status": status, "times": times}
    return found | ({"retry_after": retry_after} if retry_after is not None else {})


async def stored_turns(bot: RunningBot) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in (await bot.store.load(CHAT)).messages]


async def ask(telegram: StubTelegram, question: str, *, within: float = 3.0) -> str:
    """The customer asks once; the one message the bot sends back."""
    telegram.send_text(CHAT, question)
    texts = await telegram.wait_messages(CHAT, 1, within=within)
    assert len(texts) == 1, texts
    return texts[0]


def findings(verdict: dict[str, Any]) -> list[str]:
    return [f["code"] for f in verdict["findings"]]


def is_partial(text: str) -> bool:
    return text != ANSWER and ANSWER.startswith(text.strip()[:8])


async def test_an_ordinary_answer_reaches_the_customer_and_is_stored(
    running: RunningBot, telegram: StubTelegram, emulator: ModelEmulator
) -> None:
    await emulator.script(reply())
    assert await ask(telegram, "Where is my refund for order 7718?") == ANSWER
    requests = await emulator.chat_requests()
    assert len(requests) == 1 and requests[0]["status"] == 200 and requests[0]["completed"]
    assert requests[0]["stream"] == running.settings.bot.drafts_enabled
    if running.settings.bot.drafts_enabled:
        assert telegram.of("sendMessageDraft", CHAT), "a streamed reply shows drafts"
    turns = await stored_turns(running)
    assert turns[-1] == ("assistant", ANSWER) and turns[0][0] == "user" and "7718" in turns[0][1]


async def test_a_stream_cut_short_is_never_the_answer(
    streamed: RunningBot, telegram: StubTelegram, emulator: ModelEmulator
) -> None:
    """LLMock ends every stream cleanly after three chunks, with no finish reason and no [DONE]: the
    customer is told the assistant is unavailable; neither a part of the answer nor the question is
    stored as a finished turn."""
    await emulator.script(reply(times=RETRIES + 1), stream_fault("truncate"))
    told = await ask(telegram, "Where is my refund?")
    assert not is_partial(told), f"the cut stream was sent as the answer: {told!r}"
    assert UNAVAILABLE in told
    assert await stored_turns(streamed) == []


async def test_a_stream_cut_short_once_is_retried_and_only_the_whole_answer_is_sent(
    streamed: RunningBot, telegram: StubTelegram, emulator: ModelEmulator
) -> None:
    """Cut after its first chunk (the role, no text yet): nothing was shown, so the call itself retries,
    and the customer gets the whole answer. (Once a part was shown as a draft, this mode tells the
    customer instead: the test above; queued mode answers later: the last test.)"""
    await emulator.script(reply(times=2), stream_fault("truncate", after_chunks=1, times=1))
    assert await ask(telegram, "Where is my refund?") == ANSWER
    requests = await emulator.chat_requests()
    assert [r["fault"] for r in requests] == ["stream:truncate@1", None]
    assert "truncated_stream_accepted" not in findings(await emulator.verdict())
    assert (await stored_turns(streamed))[-1] == ("assistant", ANSWER)


@pytest.mark.parametrize("kind", ["malformed", "disconnect"])
async def test_a_corrupted_or_dropped_stream_is_a_provider_failure(
    kind: str, streamed: RunningBot, telegram: StubTelegram, emulator: ModelEmulator
) -> None:
    """A chunk that is not JSON (the SDK raises a bare JSONDecodeError) or a connection dropped mid-stream:
    the provider failed, not the bot (no internal-error text), and nothing is stored."""
    await emulator.script(reply(times=RETRIES + 1), stream_fault(kind, after_chunks=2))
    told = await ask(telegram, "Where is my refund?")
    assert told != TEXTS["en"]["internal_error"], "a provider failure answered as a bug of the bot"
    assert UNAVAILABLE in told and not is_partial(told)
    assert await stored_turns(streamed) == []


async def test_429_with_retry_after_is_retried_no_sooner(
    running: RunningBot, telegram: StubTelegram, emulator: ModelEmulator
) -> None:
    """The bot's own backoff starts at 0.05 s: only the provider's Retry-After (1 s) makes it wait."""
    await emulator.script(fail(429, times=1, retry_after=1), reply())
    assert await ask(telegram, "Where is my refund?") == ANSWER
    first, second = await emulator.chat_requests()
    assert first["status"] == 429 and second["status"] == 200
    assert second["started_at"] - first["ended_at"] >= 1.0, "retried before Retry-After elapsed"
    assert "retry_after_ignored" not in findings(await emulator.verdict())
    assert (await stored_turns(running))[-1] == ("assistant", ANSWER)


async def test_a_retry_after_longer_than_the_call_may_wait_is_not_slept_in_the_call(
    running: RunningBot, telegram: StubTelegram, emulator: ModelEmulator
) -> None:
    """Retry-After 5 s > LLM_RETRY_IN_CALL_MAX_WAIT_SECONDS (2 s): the call gives up at once with the
    provider's wait (the customer hears at once; queued mode re-queues the question for later)."""
    await emulator.script(fail(429, times=1, retry_after=5), reply())
    told = await ask(telegram, "Where is my refund?", within=IN_CALL_MAX_WAIT + 1)
    assert UNAVAILABLE in told
    assert len(await emulator.chat_requests()) == 1
    assert await stored_turns(running) == []


async def test_a_500_that_persists_gets_the_transient_text_after_the_retries(
    running: RunningBot, telegram: StubTelegram, emulator: ModelEmulator
) -> None:
    await emulator.script(fail(500))
    told = await ask(telegram, "Where is my refund?")
    assert UNAVAILABLE in told
    assert [r["status"] for r in await emulator.chat_requests()] == [500] * (RETRIES + 1)
    assert await stored_turns(running) == []


async def test_a_401_is_an_outage_not_the_customers_fault_and_is_not_retried(
    running: RunningBot, telegram: StubTelegram, emulator: ModelEmulator
) -> None:
    """A revoked key: the customer is told the service is unavailable (not asked to rephrase); a 401
    never succeeds on a retry, so one request only."""
    await emulator.script(fail(401))
    told = await ask(telegram, "Where is my refund?")
    assert told != TEXTS["en"]["bad_reply"] and UNAVAILABLE in told
    assert len(await emulator.chat_requests()) == 1
    assert "retried_non_retryable" not in findings(await emulator.verdict())
    assert await stored_turns(running) == []


# --- queued mode: a real worker process (python -m bot, polling) on redis-server --------------------


def worker_env(telegram: StubTelegram, emulator: ModelEmulator, redis_url: str, **extra: str) -> dict[str, str]:
    return {
        "BOT_TOKEN": TOKEN,
        "TELEGRAM_API_URL": telegram.base_url,
        "OPENAI_BASE_URL": emulator.base_url,
        "OPENAI_API_KEY": "sk-emulated",
        "OPENAI_MODEL": "emulated-chat",
        "OPENAI_INSTRUCTION_ROLE": "system",
        "OPENAI_TIMEOUT_SECONDS": "5",
        "OPENAI_MAX_RETRIES": str(RETRIES),
        "LLM_RETRY_BASE_SECONDS": "0.05",
        "LLM_RETRY_MAX_SECONDS": "0.2",
        "LLM_RETRY_IN_CALL_MAX_WAIT_SECONDS": str(IN_CALL_MAX_WAIT),
        "LLM_MAX_REQUESTS_PER_QUESTION": str(MAX_REQUESTS),
        "BOT_MODE": "polling",
        "REDIS_URL": redis_url,
        "POLLING_TIMEOUT_SECONDS": "1",
        "WORKER_LEASE_SECONDS": "2",
        "WORKER_IDLE_WAIT_SECONDS": "0.2",
        "DRAFT_INTERVAL_SECONDS": "0.1",
        "LOG_LEVEL": "INFO",
        "METRICS_PORT": "0",
    } | extra


MAX_REQUESTS = 5
"""LLM_MAX_REQUESTS_PER_QUESTION: model requests for one question across the worker's attempts."""


async def test_queued_a_cut_stream_is_retried_and_a_429_storm_is_capped_and_told(
    telegram: StubTelegram,
    emulator: ModelEmulator,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """One worker process. First question: every request of its first attempt is cut short (LLMock
    truncates RETRIES + 1 streams): the customer is promised an answer, never shown a part of it as
    final, and gets the whole answer later, stored once. Second question: 429 with Retry-After 0.3 s on
    every request: at most LLM_MAX_REQUESTS_PER_QUESTION requests, none sooner than Retry-After, and the
    customer, promised an answer, is finally told it could not be given (no chat ends in silence)."""
    worker = BotProcess(worker_env(telegram, emulator, redis_server.url), tmp_path)
    processes.append(worker)
    await worker.start()
    await worker.wait_log("poller: took leadership", within=90)  # a slow start is not what is tested
    await emulator.script(reply(times=RETRIES + 2), stream_fault("truncate", times=RETRIES + 1))
    telegram.send_text(CHAT, "Where is my refund?")

    def answered_or_cut() -> bool:
        return any(t == ANSWER or is_partial(t) for t in telegram.texts_to(CHAT))

    await telegram.wait_for(answered_or_cut, within=10)
    texts = telegram.texts_to(CHAT)
    assert not any(is_partial(t) for t in texts), f"a cut stream was sent as the answer: {texts}"
    assert texts.count(ANSWER) == 1 and texts[0] != ANSWER, "promised first, then answered"
    store = RedisSessionStore(redis=real_redis, keys=KeySpace("sb", TOKEN.split(":")[0]))
    assert [m.content for m in (await store.load(CHAT)).messages if m.role == "assistant"] == [ANSWER]

    await emulator.reset()
    await emulator.script(fail(429, retry_after=0.3))
    telegram.send_text(CHAT, "And my second order?")
    told = await telegram.wait_messages(CHAT, len(texts) + 2, within=10)
    promise, final = told[-2:]
    assert UNAVAILABLE in promise and final not in (promise, ANSWER), told
    requests = await emulator.chat_requests()
    assert 1 < len(requests) <= MAX_REQUESTS, f"{len(requests)} model requests for one question"
    gaps = [b["started_at"] - a["ended_at"] for a, b in itertools.pairwise(requests)]
    assert min(gaps) >= 0.3, f"retried sooner than Retry-After: {gaps}"
    assert "retry_storm" not in findings(await emulator.verdict())


async def test_a_photo_turn_in_the_chat_api_shape_an_independent_server_accepts(
    streamed: RunningBot, telegram: StubTelegram, emulator: ModelEmulator
) -> None:
    """A turn with an image part (a base64 data URL in a content list) served by LLMock, not our stub:
    the reply and the note call both go through and the history keeps the note. (LLMock's schema takes
    any content list; it does not look at the image: the stub checks that.)"""
    buffer = io.BytesIO()
    Image.new("RGB", (1280, 960), (180, 40, 40)).save(buffer, "JPEG", quality=80)
    await emulator.script(reply(times=2))  # the reply and the note, in whichever order they come
    telegram.push(telegram.photo_message(CHAT, buffer.getvalue(), caption="It arrived like this"))
    assert await telegram.wait_messages(CHAT, 1, within=30) == [ANSWER]
    requests = await emulator.chat_requests()
    assert len(requests) == 2 and all(r["status"] == 200 and r["completed"] for r in requests), requests
    [(role, user), (_, answer)] = await stored_turns(streamed)
    assert role == "user" and user == f"[photo: {ANSWER}]\nIt arrived like this" and answer == ANSWER
