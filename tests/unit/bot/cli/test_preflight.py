"""Start-up checks: missing settings named with a hint; the API key checked once against the endpoint."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import SecretStr

from bot.cli.preflight import check_api_key, missing_message, missing_settings
from bot.factory import Settings
from bot.settings import BotSettings
from services.core.errors import ConfigurationError
from services.settings import LLMSettings, MemorySettings, RedisSettings
from tests.stubs.openai_server import StubOpenAI


def settings(**bot: str) -> Settings:
    llm = {k: v for k, v in bot.items() if k.startswith("openai")}
    bot_fields = {k: v for k, v in bot.items() if not k.startswith("openai")}
    return Settings(
        bot=BotSettings(_env_file=None, **bot_fields),  # type: ignore[arg-type]
        llm=LLMSettings(_env_file=None, **llm),  # type: ignore[arg-type]
        memory=MemorySettings(_env_file=None),
        redis=RedisSettings(_env_file=None),
    )


def test_missing_settings_per_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BOT_TOKEN", "OPENAI_API_KEY", "WEBHOOK_URL", "WEBHOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
    empty = settings()
    assert missing_settings("run", empty) == ["BOT_TOKEN", "OPENAI_API_KEY"]
    assert missing_settings("console", empty) == ["OPENAI_API_KEY"]
    assert missing_settings("set-webhook", empty) == ["BOT_TOKEN", "WEBHOOK_URL", "WEBHOOK_SECRET"]
    blank_key = settings(bot_token="1:x", openai_api_key="   ")
    assert missing_settings("run", blank_key) == ["OPENAI_API_KEY"]


def test_the_message_names_each_key_the_env_file_and_the_console(tmp_path: Path) -> None:
    text = missing_message("run", ["BOT_TOKEN", "OPENAI_API_KEY"], cwd=tmp_path)
    assert "BOT_TOKEN is not set: the token @BotFather gave you" in text
    assert "OPENAI_API_KEY is not set" in text
    assert str(tmp_path / ".env") in text
    assert "./scripts/run console" in text
    assert "console" not in missing_message("run", ["OPENAI_API_KEY"], cwd=tmp_path)


async def test_a_rejected_key_stops_the_start(stub_llm: StubOpenAI) -> None:
    stub_llm.api_key = "sk-right"
    wrong = LLMSettings(_env_file=None, openai_api_key=SecretStr("sk-wrong"), openai_base_url=stub_llm.base_url)
    with pytest.raises(ConfigurationError, match="rejected") as caught:
        await check_api_key(wrong)
    assert "sk-wrong" not in str(caught.value)
    right = LLMSettings(_env_file=None, openai_api_key=SecretStr("sk-right"), openai_base_url=stub_llm.base_url)
    await check_api_key(right)
    assert stub_llm.model_list_requests == 2


async def test_an_endpoint_that_answers_too_late_is_only_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A slow provider at start is an outage the bot's retries handle (a refused connection, a wrong
    OPENAI_BASE_URL, stops the start: tests/unit/bot/cli/test_settings_errors.py)."""
    import socket

    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        slow = LLMSettings(
            _env_file=None,
            openai_api_key=SecretStr("sk-x"),
            openai_base_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
        )
        with caplog.at_level(logging.WARNING, logger="bot.cli.preflight"):
            await check_api_key(slow, request_seconds=0.5)
    assert "could not check OPENAI_API_KEY" in caplog.text and "starting anyway" in caplog.text


async def test_an_empty_key_is_refused_without_a_request() -> None:
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY is not set"):
        await check_api_key(LLMSettings(_env_file=None, openai_api_key=SecretStr("")))
