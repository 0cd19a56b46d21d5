"""The command line as an operator meets it: ``help`` and each command's own ``--help``, argument
mistakes answered (exit 2) before aiogram and openai are imported, and the terminal commands
(console, knowledge) without the production warning about REDIS_URL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.cli.commands import DESCRIPTIONS
from tests.stubs.openai_server import StubOpenAI

ROOT = Path(__file__).resolve().parents[4]
HEAVY = ("aiogram", "openai", "aiohttp", "bot.factory")


def clean_env(**settings: str) -> dict[str, str]:
    """No setting from the developer's environment leaks in (nor a .env: the cwd is a temporary folder)."""
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "SYSTEMROOT") if k in os.environ}
    return keep | {"PYTHONPATH": str(ROOT)} | settings


async def run_bot(
    args: list[str], cwd: Path, *, stdin: bytes = b"", env: dict[str, str] | None = None, **settings: str
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        cwd=cwd,
        env=clean_env(**(env or {}), **settings),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    # a hang guard, not a speed check: a niced pass beside busy cores can take minutes
    out, err = await asyncio.wait_for(process.communicate(stdin), timeout=600)
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def exit_in_fresh_interpreter(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``main(args)`` in a new interpreter; prints ``EXIT <code> [<heavy modules imported by then>]``."""
    probe = (
        "import sys\n"
        "from bot.__main__ import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit as exc:\n"
        f"    print('EXIT', exc.code, [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", probe], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=600
    )


def test_help_lists_every_command_with_its_description(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name, description in DESCRIPTIONS.items():
        assert name in text and " ".join(description.split()) in text, name
    assert "support-bot" in text


@pytest.mark.parametrize("how", [["knowledge", "--help"], ["help", "knowledge"]])
def test_a_command_has_its_own_help(how: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(how)
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m bot knowledge ")
    assert "{list,search,gaps,faq}" in out and "dead-letters" not in out and "--certificate" not in out


@pytest.mark.slow  # a new interpreter
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["knowledge", "bogus"], "invalid choice: 'bogus'"),
        (["knowledge", "search"], "knowledge search needs QUERY"),
        (["dead-letters", "replay"], "dead-letters replay needs ID"),
        (["quarantine", "show", "abc"], "CHAT_ID must be a number"),
        (["chat", "show"], "chat show needs CHAT_ID"),
        (["console", "--chat-id", "x"], "invalid int value"),
        (["report", "--days", "0"], "must be from 1 to 3660"),
        (["nonsense"], "invalid choice: 'nonsense'"),
        (["actions", "test"], "actions test needs TOOL"),
        (["actions", "test", "order_status"], "actions test needs --customer-id N"),
        (["actions", "test", "t", "--customer-id", "7", "--param", "x"], "--param takes NAME=VALUE, got 'x'"),
    ],
)
def test_an_argument_mistake_exits_2_before_the_heavy_imports(args: list[str], said: str, tmp_path: Path) -> None:
    """In a fresh interpreter: the mistake is answered while aiogram, openai and the factory are still
    unimported (they take seconds), with the command's own usage."""
    done = exit_in_fresh_interpreter(args, tmp_path)
    assert "EXIT 2 []" in done.stdout, done.stdout + done.stderr
    usage = f"usage: python -m bot {args[0] if args[0] in DESCRIPTIONS else '[-h]'}"
    assert said in done.stderr and usage in done.stderr, done.stderr


@pytest.mark.slow  # a new interpreter
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["knowledge"], "KNOWLEDGE_DIR is not set"),
        (["knowledge", "gaps"], "knowledge gaps needs REDIS_URL"),
        (["dead-letters", "list"], "dead-letters needs REDIS_URL"),
        (["quarantine", "drop", "5"], "quarantine needs REDIS_URL"),
        (["chat", "show", "5"], "REDIS_URL is unset: the sessions live only in the running bot's process"),
        (["actions", "list"], "actions: ACTIONS_FILE is not set"),
        (["report"], "report reads the conversation records in Redis, and REDIS_URL is unset"),
    ],
)
def test_a_setting_a_command_needs_is_named_before_the_heavy_imports(
    args: list[str], said: str, tmp_path: Path
) -> None:
    done = exit_in_fresh_interpreter(args, tmp_path)
    assert "EXIT 2 []" in done.stdout, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow  # a new interpreter
async def test_knowledge_prints_no_redis_warning(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "returns.md").write_text("# Returns\n\n## Refunds\n\nRefunds are paid within 14 days.\n")
    code, out, err = await run_bot(["knowledge"], tmp_path, KNOWLEDGE_DIR=str(docs))
    assert code == 0, err
    assert "returns.md\tReturns\t" in out
    assert "REDIS_URL" not in err and "WARNING" not in err, err


@pytest.mark.slow  # a new interpreter
async def test_console_prints_no_redis_warning(tmp_path: Path, stub_llm: StubOpenAI) -> None:
    code, out, err = await run_bot(
        ["console", "--chat-id", "5"],
        tmp_path,
        stdin=b"hello console\n/quit\n",
        OPENAI_BASE_URL=stub_llm.base_url,
        OPENAI_API_KEY="sk-test-console",
        OPENAI_MODEL="stub-chat",
    )
    assert code == 0, err
    assert "bot> Support answer to: hello console" in out
    # the lowest allowed openai warns that it has no aiohttp transport: only the REDIS_URL line counts
    assert "REDIS_URL" not in err, err
    assert json.dumps(stub_llm.chat_requests[-1]).count("hello console") == 1
