"""A queued process whose start fails after it began listening: ``stop`` (run_queued's ``finally``)
stops what was started (the ops server), and closes the core once: the engine's model client and
the media reader's transcription client, which the dispatcher's shutdown never closes in queued mode."""

from __future__ import annotations

import socket

import fakeredis
import pytest

from bot.factory import Settings, build_app
from bot.queueing.process import QueuedProcess
from bot.settings import BotSettings
from services.backends.redis.backend import RedisBackend
from services.backends.redis.keys import KeySpace
from services.settings import KnowledgeSettings, LLMSettings, MediaSettings, MemorySettings, RedisSettings


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def settings(metrics_port: int) -> Settings:
    return Settings(
        bot=BotSettings(
            _env_file=None,
            bot_token="123456:TEST-token-secret",  # type: ignore[call-arg]
            metrics_host="127.0.0.1",
            metrics_port=metrics_port,
        ),
        llm=LLMSettings(_env_file=None, openai_api_key="sk-test-secret", openai_base_url="http://127.0.0.1:9/v1"),  # type: ignore[call-arg]
        memory=MemorySettings(_env_file=None),  # type: ignore[call-arg]
        redis=RedisSettings(_env_file=None, redis_url="redis://127.0.0.1:9/0"),  # type: ignore[call-arg]
        knowledge=KnowledgeSettings(_env_file=None),  # type: ignore[call-arg]
        media=MediaSettings(_env_file=None, voice_enabled=True),  # type: ignore[call-arg]
    )


async def test_a_start_failing_after_listening_is_stopped_and_the_core_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    backend = RedisBackend(redis=fakeredis.FakeAsyncRedis(), keys=KeySpace("t", "123456"), ttl_seconds=60, per_minute=5)
    app = build_app(settings(port), backend)
    process = QueuedProcess(app)

    async def answered(*_args: object, **_kwargs: object) -> bool:
        return True

    def fails() -> None:
        raise RuntimeError("a task could not be started")

    monkeypatch.setattr(app.bot, "get_me", answered)
    monkeypatch.setattr(app.bot, "set_my_commands", answered)
    monkeypatch.setattr(process, "_start_tasks", fails)
    with pytest.raises(RuntimeError, match="could not be started"):
        try:
            await process.start()
        finally:
            await process.stop()
    with socket.socket() as again:  # the ops server it had started is gone
        again.bind(("127.0.0.1", port))
    engine_client = app.chat._llm._client  # type: ignore[attr-defined]
    transcription_client = app.core.media._transcriber._client  # type: ignore[union-attr]
    assert engine_client.is_closed() and transcription_client.is_closed()
    await app.bot.session.close()
