"""Start-up mistakes found once the bot reaches its servers and folders: real ``python -m bot`` processes
(long random secrets in the environment and .env), the stub Bot API and OpenAI servers on loopback, a
closed port for a refused connection. Each is one line naming the variable and the fix, exit code 2, no
traceback, no piece of any secret."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram
from tests.unit.bot.cli.test_settings_errors import API_KEY, assert_one_line_error, closed_port, run_bots


async def test_start_up_mistakes_are_one_line_each_without_secrets(
    telegram: StubTelegram, stub_llm: StubOpenAI, tmp_path: Path
) -> None:
    """Found once the bot reaches its servers and folders: a Bot API URL that is not one, a refused
    connection, a knowledge folder that is missing or holds nothing readable, a metrics port in use."""
    stub_llm.api_key = API_KEY
    empty = tmp_path / "unreadable"
    empty.mkdir()
    (empty / "notes.docx").write_bytes(b"PK\x03\x04 not a format the bot reads")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        works = {
            "TELEGRAM_API_URL": telegram.base_url,
            "OPENAI_BASE_URL": stub_llm.base_url,
            "METRICS_PORT": "0",
            "METRICS_HOST": "127.0.0.1",
        }
        cases = (
            ({"TELEGRAM_API_URL": stub_llm.base_url.removesuffix("/v1")}, ("TELEGRAM_API_URL",)),
            ({"OPENAI_BASE_URL": f"http://127.0.0.1:{closed_port()}/v1"}, ("OPENAI_BASE_URL",)),
            ({"KNOWLEDGE_DIR": str(tmp_path / "no-such-folder")}, ("KNOWLEDGE_DIR",)),
            ({"KNOWLEDGE_DIR": str(empty)}, ("KNOWLEDGE_DIR",)),
            ({"METRICS_PORT": busy, "METRICS_PORT_TRIES": "1"}, ("METRICS_PORT",)),
        )
        runs = await run_bots([works | env for env, _ in cases], tmp_path)
    for (code, output), (_, needles) in zip(runs, cases, strict=True):
        assert_one_line_error(code, output, *needles)
        assert "cannot start" in output, output
