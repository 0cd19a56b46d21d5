"""``python -m bot`` as operators run it: a real process, configured only by environment variables."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import RedisServer, free_port
from tests.e2e.harness import TOKEN
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

SECRET = "webhook-secret_123"
API_KEY = "sk-test-very-secret-key"


class BotProcess:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env = {**os.environ, **env}
        for name in ("REDIS_URL", "BOT_MODE"):
            if name not in env:
                self.env.pop(name, None)
        self.cwd = cwd
        self.process: asyncio.subprocess.Process | None = None
        self.log = bytearray()
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            cwd=self.cwd,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while chunk := await self.process.stdout.read(4096):
            self.log.extend(chunk)

    async def wait_log(self, needle: str, within: float = 20) -> None:
        for _ in range(int(within * 20)):
            if needle in self.log.decode(errors="replace"):
                return
            assert self.process is not None
            if self.process.returncode is not None:
                break
            await asyncio.sleep(0.05)
        raise AssertionError(f"{needle!r} not logged; log:\n{self.log.decode(errors='replace')}")

    async def stop(self) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.process.wait(), 20)
        if self._reader is not None:
            await self._reader
        return code


def base_env(telegram: StubTelegram, stub_llm: StubOpenAI) -> dict[str, str]:
    return {
        "BOT_TOKEN": TOKEN,
        "TELEGRAM_API_URL": telegram.base_url,
        "OPENAI_BASE_URL": stub_llm.base_url,
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_MODEL": "stub-chat",
        "OPENAI_MAX_RETRIES": "0",
        "LOG_LEVEL": "DEBUG",
    }


@pytest.fixture
async def processes() -> AsyncIterator[list[BotProcess]]:
    started: list[BotProcess] = []
    yield started
    for process in started:
        if process.process is not None and process.process.returncode is None:
            process.process.kill()
            await process.process.wait()


async def test_polling_without_redis_url_uses_in_process_store(
    telegram: StubTelegram, stub_llm: StubOpenAI, tmp_path: Path, processes: list[BotProcess]
) -> None:
    bot = BotProcess(base_env(telegram, stub_llm), tmp_path)
    processes.append(bot)
    await bot.start()
    await bot.wait_log("REDIS_URL is unset: using the in-process session store")
    await bot.wait_log("starting in polling mode")
    telegram.send_text(42, "hello from a process")
    await telegram.wait_messages(42, 1, within=20)
    telegram.send_text(42, "second message")
    await telegram.wait_messages(42, 2, within=20)
    assert "hello from a process" in json.dumps(stub_llm.chat_requests[-1])
    assert telegram.of("deleteWebhook") and telegram.of("setMyCommands")
    assert await bot.stop() == 0
    log = bot.log.decode(errors="replace")
    assert TOKEN not in log and TOKEN.split(":")[1] not in log
    assert API_KEY not in log


async def test_webhook_mode_checks_the_secret(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, tmp_path: Path, processes: list[BotProcess]
) -> None:
    port = free_port()
    env = base_env(telegram, stub_llm) | {
        "BOT_MODE": "webhook",
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_PORT": str(port),
        "WEBHOOK_PATH": "/tg/hook",
        "WEBHOOK_SECRET": SECRET,
        "REDIS_URL": redis_server.url,
    }
    bot = BotProcess(env, tmp_path)
    processes.append(bot)
    await bot.start()
    await bot.wait_log("webhook server on 127.0.0.1")
    url = f"http://127.0.0.1:{port}/tg/hook"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
            assert response.status == 200
        update = telegram.message_update(77, "let me in")
        async with http.post(url, json=update) as response:
            assert response.status in (401, 403)
        bad = {"X-Telegram-Bot-Api-Secret-Token": "wrong"}
        async with http.post(url, json=telegram.message_update(77, "let me in"), headers=bad) as response:
            assert response.status in (401, 403)
        await asyncio.sleep(0.5)
        assert telegram.of("sendMessage") == [] and stub_llm.requests == []
        good = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        async with http.post(url, json=telegram.message_update(77, "hello webhook"), headers=good) as response:
            assert response.status == 200
    texts = await telegram.wait_messages(77, 1, within=20)
    assert texts == ["Support answer to: hello webhook"]
    assert await bot.stop() == 0


async def test_set_webhook_command(telegram: StubTelegram, stub_llm: StubOpenAI, tmp_path: Path) -> None:
    env = {
        **os.environ,
        **base_env(telegram, stub_llm),
        "WEBHOOK_URL": "https://bot.example.com/tg/hook",
        "WEBHOOK_SECRET": SECRET,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "set-webhook",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, output.decode()
    call = telegram.of("setWebhook")[0].params
    assert call["url"] == "https://bot.example.com/tg/hook" and call["secret_token"] == SECRET
