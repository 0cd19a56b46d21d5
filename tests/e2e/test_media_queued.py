"""Media in queued mode: three ``python -m bot`` workers (polling) on one Redis, the stub Bot API and
the stub model. An album is recorded by the intake and answered once by whichever worker serves the
chat; a voice note whose reply failed is retried by the queue without a second transcription."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from tests.e2e.conftest import SharedRedis
from tests.e2e.processes import BotProcess, base_env
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram
from tests.stubs.vision import images_in

CHAT = 778001


def jpeg(color: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (1280, 960), color).save(buffer, "JPEG", quality=80)
    return buffer.getvalue()


async def start_workers(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_url: str, tmp_path: Path, processes: list[BotProcess]
) -> None:
    env = base_env(telegram, stub_llm) | {
        "BOT_MODE": "polling",
        "REDIS_URL": redis_url,
        "POLLING_TIMEOUT_SECONDS": "1",
        "WORKER_LEASE_SECONDS": "2",
        "WORKER_IDLE_WAIT_SECONDS": "0.2",
        "LOG_LEVEL": "WARNING",
        "IMAGE_TOKENS_RULE": "gpt-4o",  # as the stub bills images
    }
    for _ in range(3):
        process = BotProcess(env, tmp_path)
        processes.append(process)
        await process.start()


async def test_queued_workers_answer_an_album_once_and_transcribe_a_retried_voice_note_once(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    shared_redis: SharedRedis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    await start_workers(telegram, stub_llm, shared_redis.url, tmp_path, processes)
    for update in telegram.album(CHAT, [jpeg((200, 10, 10)), jpeg((10, 200, 10)), jpeg((10, 10, 200))], caption="3"):
        telegram.push(update)
    telegram.send_text(CHAT, "thanks")
    await telegram.wait_messages(CHAT, 2, within=120)
    album_requests = [r for r in stub_llm.chat_requests if images_in(r)]
    assert len(album_requests) == 1 and len(images_in(album_requests[0])) == 3
    stub_llm.transcriptions.default_text = "My order 7718 has not arrived."
    stub_llm.chat_replies.append(503)  # the reply to the voice note fails once: the queue retries the turn
    telegram.push(telegram.voice_message(CHAT, b"OggS\x00fake-opus-bytes", duration=4))
    await telegram.wait_for(lambda: any("7718" in t for t in telegram.texts_to(CHAT)), within=120)
    assert len(stub_llm.transcriptions.calls) == 1, "the retried turn reuses the transcript"
    replies = telegram.texts_to(CHAT)
    assert len([t for t in replies if t.startswith("Support answer to")]) == 3, replies
