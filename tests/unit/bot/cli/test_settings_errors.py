"""The operator's first hour: every settings mistake is one line naming the environment variable and the
fix, exit code 2, no traceback, and never a secret's value (nor a piece of it). Real ``python -m bot``
processes (the real entry point) with long random secrets in the environment and in ``.env``, for the
mistakes caught before the heavy imports; the ones found once the bot reaches its servers and folders
are in tests/e2e/test_start_up_mistakes.py (stub servers on loopback, a closed port)."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

BOT_ID = "7312894456"
SECRET_PART = secrets.token_urlsafe(30)
BOT_TOKEN = f"{BOT_ID}:{SECRET_PART}"
API_KEY = "sk-" + secrets.token_urlsafe(40)
WEBHOOK_SECRET = secrets.token_urlsafe(40)
REDIS_PASSWORD = secrets.token_urlsafe(24)
GRAFANA_PASSWORD = secrets.token_urlsafe(24)
SECRETS = (SECRET_PART, API_KEY, WEBHOOK_SECRET, REDIS_PASSWORD, GRAFANA_PASSWORD)
_PROGRESS = re.compile(r" (?:INFO|DEBUG) ")
"""A log line of the start-up's progress (the level field of the text log format), not an error."""


def closed_port() -> int:
    with socket.socket() as sock:  # bound, never listening: a connection to it is refused
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def assert_no_secret(output: str, extra: Iterable[str] = ()) -> None:
    """No secret, and no 6-character piece of one (a tail, a head), appears in ``output``."""
    for value in (*SECRETS, *extra):
        for start in range(len(value) - 5):
            assert value[start : start + 6] not in output, f"a piece of a secret leaked: {output}"


def assert_one_line_error(code: int, output: str, *needles: str) -> None:
    """Exit 2, no traceback, no secret, and each mistake one line: exactly one line that is not an
    INFO/DEBUG log line names each needle, and there are few such lines beyond them."""
    assert code == 2, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.strip() and not _PROGRESS.search(line)]
    for needle in needles:
        lines = [line for line in errors if needle in line]
        assert len(lines) == 1, f"not one line names {needle!r}: {output}"
    assert len(errors) <= len(needles) + 2, f"more than one line a mistake: {output}"
    assert_no_secret(output)


async def run_bots(cases: list[dict[str, str]], root: Path, within: float = 120) -> list[tuple[int, str]]:
    """``python -m bot`` once per environment, all at once, each in its own folder (its own .env,
    holding the secrets too); returns each exit code and output (stdout and stderr together)."""

    async def one(index: int, env: dict[str, str]) -> tuple[int, str]:
        cwd = root / f"case{index}"
        cwd.mkdir()
        (cwd / ".env").write_text(
            f"OPENAI_API_KEY={API_KEY}\nGRAFANA_ADMIN_PASSWORD={GRAFANA_PASSWORD}\nLOG_LEVEL=DEBUG\n", encoding="utf-8"
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            cwd=cwd,
            env={"PATH": os.environ["PATH"], "HOME": str(cwd), "BOT_TOKEN": BOT_TOKEN, **env},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            output, _ = await asyncio.wait_for(process.communicate(), within)
        except TimeoutError:
            process.kill()
            output, _ = await process.communicate()
            return -1, output.decode(errors="replace")
        assert process.returncode is not None
        return process.returncode, output.decode(errors="replace")

    return list(await asyncio.gather(*(one(index, env) for index, env in enumerate(cases))))


@pytest.mark.slow  # a new interpreter
async def test_settings_mistakes_are_one_line_each_all_at_once_without_secrets(tmp_path: Path) -> None:
    """Caught when the settings are read, before the heavy imports: each process stops at once."""
    nowhere = f"http://127.0.0.1:{closed_port()}"
    redis = f"redis://default:{REDIS_PASSWORD}@127.0.0.1:{closed_port()}/0"
    common = {"TELEGRAM_API_URL": nowhere, "OPENAI_BASE_URL": nowhere + "/v1"}
    cases = (
        # three groups wrong at once, cross-field checks among them: each named, none hiding another
        (
            {
                "BOT_MODE": "webhook",
                "CHAT_INPUT_TOKEN_BUDGET": "100",
                "WORKER_LEASE_SECONDS": "abc",
                "REDIS_URL": redis,
            },
            ("WEBHOOK_SECRET", "SUMMARY_MAX_TOKENS", "CHAT_INPUT_TOKEN_BUDGET", "WORKER_LEASE_SECONDS"),
        ),
        ({"CHAT_INPUT_TOKEN_BUDGET": "abc"}, ("CHAT_INPUT_TOKEN_BUDGET",)),
        ({"BOT_TOKEN": SECRET_PART}, ("BOT_TOKEN", "@BotFather")),
        ({"OPENAI_BASE_URL": "127.0.0.1:8000/v1"}, ("OPENAI_BASE_URL", "http://")),
        (
            {
                "BOT_MODE": "webhook",
                "WEBHOOK_SECRET": WEBHOOK_SECRET + "!",
                "REDIS_URL": f"http://default:{REDIS_PASSWORD}@127.0.0.1/0",
            },
            ("WEBHOOK_SECRET", "REDIS_URL"),
        ),
    )
    runs = await run_bots([common | env for env, _ in cases], tmp_path)
    for (code, output), (_, needles) in zip(runs, cases, strict=True):
        assert_one_line_error(code, output, *needles)
        assert "chat_input_token_budget" not in output and "input_value" not in output, output
        assert "cannot start" in output, output


def test_a_refused_connection_is_named_as_such(tmp_path: Path) -> None:
    """Not "APITimeoutError": the line says the connection was refused and where."""
    pytest.importorskip("openai")
    from bot.cli.preflight import check_api_key
    from services.core.errors import ConfigurationError
    from services.settings import LLMSettings

    url = f"http://127.0.0.1:{closed_port()}/v1"
    settings = LLMSettings(_env_file=None, openai_api_key=API_KEY, openai_base_url=url)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError) as caught:
        asyncio.run(check_api_key(settings, attempts=2, first_delay=0.01))
    message = str(caught.value)
    assert "OPENAI_BASE_URL" in message and url in message and "refused" in message, message
    assert_no_secret(message)


@pytest.mark.parametrize("name", ["BOT_TOKEN", "WEBHOOK_SECRET"])
def test_a_secret_with_a_trailing_newline_is_one_line_without_its_value(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret written to a file (a Docker or Kubernetes secret) often ends in a newline: "$" of a
    pattern accepted it, and aiogram then stopped the start with a traceback."""
    from bot.cli.settings_errors import SettingsError, load_settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv(name, (BOT_TOKEN if name == "BOT_TOKEN" else WEBHOOK_SECRET) + "\n")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert [line.split()[0] for line in caught.value.lines] == [name], caught.value.lines
    assert_no_secret("\n".join(caught.value.lines))


def test_every_group_is_checked_and_no_value_is_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process, the same reading as the entry point: one line per mistake in every group (a group's
    error hides no other's), each beginning with a real variable's name, none holding a value read."""
    from bot.cli.settings_errors import SettingsError, load_settings
    from bot.settings import Settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={API_KEY}\nGRAFANA_ADMIN_PASSWORD={GRAFANA_PASSWORD}\n")
    names = {
        field.upper()
        for group in Settings.__dataclass_fields__.values()
        for field in group.default_factory.model_fields  # type: ignore[union-attr]
    }
    for name in names:  # only what this test sets is read
        monkeypatch.delenv(name, raising=False)
    mistakes = {
        "BOT_TOKEN": f"{SECRET_PART} {SECRET_PART}",
        "WEBHOOK_SECRET": WEBHOOK_SECRET + "/",
        "REDIS_URL": f"http://default:{REDIS_PASSWORD}@127.0.0.1/0",
        "CHAT_INPUT_TOKEN_BUDGET": "100",
        "HISTORY_LOW_WATER": "0.5",
        "KNOWLEDGE_STATIC_TOKENS": "99999",
        "KNOWLEDGE_PASSAGE_TOKENS": "1999",
        "IMAGE_MAX_PER_TURN": "eleven",
        "WORKER_LEASE_SECONDS": "31",
        "EVENT_LOOP": "trio",
        "DRAFTS_ENABLED": "sometimes",
    }
    for name, value in mistakes.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    lines = caught.value.lines
    assert all(line.split("=")[0].split()[0] in names for line in lines), lines
    for name in mistakes:
        assert any(name in line for line in lines), (name, lines)
    assert {"SUMMARY_MAX_TOKENS", "WEBHOOK_SECRET"} <= {line.split("=")[0].split()[0] for line in lines}
    assert_no_secret("\n".join(lines))


def test_log_lines_and_their_exceptions_are_scrubbed_of_secrets() -> None:
    """The second guard: a library's exception text (a request URL holds the bot token) is scrubbed."""
    import io
    import logging

    from bot.redaction import REDACTED, RedactingFormatter, secret_values
    from bot.settings import BotSettings, Settings
    from services.settings import LLMSettings, RedisSettings

    settings = Settings(
        bot=BotSettings(_env_file=None, bot_token=BOT_TOKEN, webhook_secret=WEBHOOK_SECRET),  # type: ignore[call-arg,arg-type]
        llm=LLMSettings(_env_file=None, openai_api_key=API_KEY, openai_base_url="http://u:pw-1234@h/v1"),  # type: ignore[call-arg,arg-type]
        redis=RedisSettings(_env_file=None, redis_url=f"redis://default:{REDIS_PASSWORD}@h:6379/0"),  # type: ignore[call-arg,arg-type]
    )
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(RedactingFormatter(logging.Formatter("%(message)s"), secret_values(settings)))
    log = logging.getLogger("test.redaction")
    log.addHandler(handler)
    log.propagate = False
    try:
        try:
            raise ValueError(f"GET https://api.telegram.org/bot{BOT_TOKEN}/getMe failed (secret {SECRET_PART})")
        except ValueError:
            log.exception("call failed with key %s on %s", API_KEY, "http://u:pw-1234@h/v1")
        log.warning("redis at redis://default:%s@h:6379/0 and %s", REDIS_PASSWORD, WEBHOOK_SECRET)
    finally:
        log.removeHandler(handler)
    text = out.getvalue()
    assert REDACTED in text and "getMe failed" in text and "pw-1234" not in text
    assert_no_secret(text)


def test_an_uncaught_exception_is_printed_scrubbed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The entry point's redact_secrets also covers a traceback nothing caught (the last resort)."""
    import logging

    from bot.redaction import REDACTED, redact_secrets
    from bot.settings import BotSettings, Settings

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    redact_secrets(Settings(bot=BotSettings(_env_file=None, bot_token=BOT_TOKEN)))  # type: ignore[call-arg,arg-type]
    try:
        raise RuntimeError(f"https://api.telegram.org/bot{BOT_TOKEN}/getMe")
    except RuntimeError as exc:
        sys.excepthook(RuntimeError, exc, exc.__traceback__)
    printed = capsys.readouterr().err
    assert "RuntimeError" in printed and REDACTED in printed
    assert_no_secret(printed)


async def test_a_refused_connection_in_a_turn_is_not_called_a_timeout() -> None:
    """The openai client's aiohttp transport (the bot's default) reports a refused connection as
    APITimeoutError; the engine's error says what happened."""
    import openai

    from services.llm.errors import translate_openai_error

    transport = getattr(openai, "DefaultAioHttpClient", None)  # older openai: httpx, APIConnectionError
    client = openai.AsyncOpenAI(
        api_key=API_KEY,
        base_url=f"http://127.0.0.1:{closed_port()}/v1",
        max_retries=0,
        http_client=transport() if transport is not None else None,
    )
    try:
        with pytest.raises(openai.APIConnectionError) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        await client.close()
    message = str(translate_openai_error(caught.value))
    assert "connection refused" in message, message
    assert_no_secret(message)


def test_a_list_setting_that_is_not_json_is_one_line_without_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """pydantic-settings decodes list and mapping settings as JSON and raises its own error, not a
    ValidationError: still one line naming the variable."""
    from pydantic_settings import BaseSettings

    from bot.cli.settings_errors import unreadable

    class Hosts(BaseSettings):
        safe_hosts: list[str] = []

    monkeypatch.setenv("SAFE_HOSTS", f"help.example.com,{API_KEY}")
    with pytest.raises(ValueError) as caught:
        Hosts(_env_file=None)  # type: ignore[call-arg]
    line = unreadable(caught.value)
    assert line.startswith("SAFE_HOSTS could not be read") and "JSON" in line, line
    assert_no_secret(line)
