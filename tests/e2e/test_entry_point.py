"""``python -m bot`` as operators run it: a real process, configured only by environment variables."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from bot.telegram.texts import text
from tests.conftest import RedisServer, free_port
from tests.e2e.harness import TOKEN
from tests.e2e.processes import API_KEY, SECRET, BotProcess, base_env, run_side_by_side
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

ROOT = Path(__file__).resolve().parents[2]


FROZEN = "start-up objects frozen out of the garbage collector's way: "


def frozen_at_start(bot: BotProcess) -> int:
    """How many objects the process froze once wired (a full collection then skips them)."""
    line = next(line for line in bot.log.decode(errors="replace").splitlines() if FROZEN in line)
    return int(line.split(FROZEN)[1].split()[0])


async def test_polling_without_redis_url_uses_in_process_store(
    telegram: StubTelegram, stub_llm: StubOpenAI, tmp_path: Path, processes: list[BotProcess]
) -> None:
    bot = BotProcess(base_env(telegram, stub_llm), tmp_path)
    processes.append(bot)
    await bot.start()
    await bot.wait_log("REDIS_URL is unset: using the in-process session store")
    await bot.wait_log("starting in polling mode")
    assert frozen_at_start(bot) > 10_000
    telegram.send_text(42, "hello from a process")
    await telegram.wait_messages(42, 1, within=20)
    telegram.send_text(42, "second message")
    await telegram.wait_messages(42, 2, within=20)
    assert "hello from a process" in json.dumps(stub_llm.chat_requests[-1])
    assert telegram.of("deleteWebhook")
    menus = {call.params.get("language_code"): call.params["commands"] for call in telegram.of("setMyCommands")}
    assert set(menus) == {None, "ru"}, "the default menu (English) and one per other language"
    for language, commands in menus.items():
        described = {c["command"]: c["description"] for c in commands}
        assert described == {name: text(language or "en", f"command_{name}") for name in ("new", "forget", "help")}
    assert await bot.stop() == 0
    log = bot.log.decode(errors="replace")
    assert TOKEN not in log and TOKEN.split(":")[1] not in log
    assert API_KEY not in log


@pytest.mark.parametrize("queued", [True, False], ids=["redis-queue", "in-process"])
async def test_webhook_mode_checks_the_secret(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    tmp_path: Path,
    processes: list[BotProcess],
    queued: bool,
) -> None:
    port = free_port()
    env = base_env(telegram, stub_llm) | {
        "BOT_MODE": "webhook",
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_PORT": str(port),
        "WEBHOOK_PATH": "/tg/hook",
        "WEBHOOK_SECRET": SECRET,
    }
    if queued:
        env["REDIS_URL"] = redis_server.url
    bot = BotProcess(env, tmp_path)
    processes.append(bot)
    await bot.start()
    await bot.wait_http_ok(f"http://127.0.0.1:{port}/healthz")
    if not queued:
        await bot.wait_log("REDIS_URL is unset: using the in-process session store")
    await bot.wait_log(FROZEN)
    assert frozen_at_start(bot) > 10_000
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


async def test_a_restarted_process_keeps_the_session(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,  # a flushed database: no poller offset left by another test's bot
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    env = base_env(telegram, stub_llm) | {"REDIS_URL": redis_server.url, "POLLING_TIMEOUT_SECONDS": "1"}
    first = BotProcess(env, tmp_path)
    processes.append(first)
    await first.start()
    telegram.send_text(91, "My ticket is T-4410")
    await telegram.wait_messages(91, 1, within=20)
    assert await first.stop() == 0
    second = BotProcess(env, tmp_path)
    processes.append(second)
    await second.start()
    telegram.send_text(91, "Any news?")
    await telegram.wait_messages(91, 2, within=20)
    assert "T-4410" in json.dumps(stub_llm.chat_requests[-1], ensure_ascii=False)
    assert await second.stop() == 0


def test_bad_settings_are_refused_at_start_up(tmp_path: Path) -> None:

    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    cases = (
        ({"CHAT_INPUT_TOKEN_BUDGET": "0", "BOT_TOKEN": TOKEN}, "CHAT_INPUT_TOKEN_BUDGET must be greater than 0"),
        ({"BOT_MODE": "webhook", "BOT_TOKEN": TOKEN}, "BOT_MODE=webhook needs WEBHOOK_SECRET"),
        ({}, "BOT_TOKEN is not set"),
        ({"BOT_TOKEN": TOKEN}, "OPENAI_API_KEY is not set"),
        ({"BOT_TOKEN": TOKEN, "OPENAI_API_KEY": " "}, "OPENAI_API_KEY is not set"),
    )
    runs = run_side_by_side([base | env for env, _ in cases], tmp_path)
    for (code, output), (_, expected) in zip(runs, cases, strict=True):
        assert code != 0 and expected in output, output
        assert "Traceback" not in output


async def test_a_key_the_endpoint_rejects_stops_the_start(
    telegram: StubTelegram, stub_llm: StubOpenAI, tmp_path: Path
) -> None:
    stub_llm.api_key = "sk-the-right-one"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        cwd=tmp_path,
        env={**os.environ, **base_env(telegram, stub_llm)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 30)
    text = output.decode()
    assert process.returncode == 2, text
    assert "OPENAI_API_KEY was rejected by " + stub_llm.base_url in text
    assert "Traceback" not in text and API_KEY not in text
    assert not telegram.calls, "nothing was started"


async def run_set_webhook(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "set-webhook",
        *args,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_set_webhook_uploads_a_self_signed_certificate_and_refuses_urls_telegram_never_calls(
    telegram: StubTelegram, stub_llm: StubOpenAI, tmp_path: Path
) -> None:
    tls = tmp_path / "tls"
    made = await asyncio.create_subprocess_exec(
        str(ROOT / "scripts" / "self-signed-cert"), "203.0.113.7", str(tls), stdout=asyncio.subprocess.DEVNULL
    )
    assert await made.wait() == 0
    env = base_env(telegram, stub_llm) | {"WEBHOOK_SECRET": SECRET}
    good_url = {"WEBHOOK_URL": "https://203.0.113.7:8443/telegram/webhook"}
    refused = (
        (env | {"WEBHOOK_URL": "http://203.0.113.7:8080/telegram/webhook"}, (), "must be an https:// URL"),
        (
            env | {"WEBHOOK_URL": "https://203.0.113.7:8080/telegram/webhook"},
            (),
            "port 8080, but Telegram posts webhooks only to ports",
        ),
        (env | good_url, ("--certificate", str(tls / "privkey.pem")), "holds a private key"),
    )
    plain_url = {"WEBHOOK_URL": "https://bot.example.com/tg/hook"}  # behind a proxy with a real certificate
    *runs, (plain_code, plain_output) = await asyncio.gather(  # side by side: each is a whole interpreter start
        *(run_set_webhook(run_env, tmp_path, *args) for run_env, args, _ in refused),
        run_set_webhook(env | plain_url, tmp_path),
    )
    for (code, output), (_, _, reason) in zip(runs, refused, strict=True):
        assert code == 2 and reason in output and "Traceback" not in output, output
    assert plain_code == 0, plain_output
    assert [call.params["url"] for call in telegram.of("setWebhook")] == [plain_url["WEBHOOK_URL"]]
    plain = telegram.of("setWebhook")[0].params
    assert plain["secret_token"] == SECRET and "certificate" not in plain
    code, output = await run_set_webhook(env | good_url, tmp_path, "--certificate", str(tls / "fullchain.pem"))
    assert code == 0, output
    call = telegram.of("setWebhook")[1].params
    assert call["url"] == "https://203.0.113.7:8443/telegram/webhook" and call["secret_token"] == SECRET
    attached = call[call["certificate"].removeprefix("attach://")]  # the multipart part it points to
    assert attached["content"] == (tls / "fullchain.pem").read_text()
