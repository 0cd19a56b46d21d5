"""``python -m bot actions check|list|test`` as an operator runs them, and the start refused on an
invalid ACTIONS_FILE (one line per mistake, exit 2, never a secret)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from bot.__main__ import _actions
from bot.cli.commands import parse_command_line
from bot.cli.preflight import actions_file_problems, check_actions_file
from bot.cli.settings_errors import load_settings
from tests.unit.bot.cli.test_cli import clean_env
from tests.unit.services.actions.shop import EXAMPLE, SECRET

BROKEN = EXAMPLE.replace("    confirm: Cancel order {order_id}?\n", "").replace("{order_id}/cancel", "{order}/cancel")


@pytest.fixture
def operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A deployment folder: the example file, its secret and the operators' group in .env."""
    monkeypatch.chdir(tmp_path)
    for name in ("ACTIONS_FILE", "SHOP_API_TOKEN", "OPERATOR_CHAT_ID", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "actions.yaml").write_text(EXAMPLE)
    (tmp_path / "broken.yaml").write_text(BROKEN)
    (tmp_path / ".env").write_text(f"ACTIONS_FILE=actions.yaml\nSHOP_API_TOKEN={SECRET}\nOPERATOR_CHAT_ID=-100123\n")
    return tmp_path


def command(*argv: str) -> int:
    return asyncio.run(_actions(parse_command_line(["actions", *argv]), load_settings()))


def test_check_prints_ok_and_the_count(operator: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert command() == 0 and command("check", "actions.yaml") == 0
    assert capsys.readouterr().out == "ok: 3 tools\nok: 3 tools\n"


def test_check_prints_one_line_per_mistake_and_exits_2(operator: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert command("check", "broken.yaml") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "tool cancel_order: confirm: a write tool needs the text the customer confirms, e.g. confirm: Cancel "
        "order {order_id}?",
        "tool cancel_order: url: {order} is not a declared parameter: add it to params or fix the name",
        "tool cancel_order: params.order_id: is never used in the request: use {order_id} in url, query, headers "
        "or json",
        "broken.yaml: 3 mistake(s); docs/actions.md explains each key",
    ]


def test_list_prints_each_tool_with_its_risk(operator: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert command("list") == 0
    assert capsys.readouterr().out.splitlines() == [
        "order_status\tread\tGET\thttps://shop.example.com\truns at once",
        "cancel_order\twrite\tPOST\thttps://shop.example.com\tthe customer confirms: Cancel order {order_id}?",
        "refund\tapproval\tPOST\thttp://10.0.0.12:8080\tan operator approves\tneeds the phone",
        "3 tools, hosts: shop.example.com, 10.0.0.12",
    ]


def test_a_write_is_not_sent_without_yes(operator: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = command("test", "cancel_order", "--param", "order_id=5521", "--param", "reason=other", "--customer-id", "7")
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[:2] == ["the customer confirms: Cancel order {order_id}?", "Cancel order 5521?"]
    assert out[2].startswith("Idempotency-Key: ") and len(out[2].split()[-1]) == 32
    assert out[3].startswith("not sent: add --yes")


def test_test_refuses_arguments_as_the_bot_would(operator: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert command("test", "order_status", "--param", "order_id=../admin", "--customer-id", "7") == 2
    assert capsys.readouterr().out.startswith("the model's call would be refused: order_id: does not have")
    assert command("test", "nope", "--customer-id", "7") == 2


def test_the_start_is_refused_on_an_invalid_file(
    operator: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert actions_file_problems(load_settings()) == []
    (operator / ".env").write_text(f"ACTIONS_FILE=broken.yaml\nSHOP_API_TOKEN={SECRET}\n")
    problems = actions_file_problems(load_settings())
    assert problems[0] == "ACTIONS_FILE broken.yaml: tool cancel_order: confirm: a write tool needs the text the " + (
        "customer confirms, e.g. confirm: Cancel order {order_id}?"
    )
    assert any("tool refund: risk: approval needs the operators' group: set OPERATOR_CHAT_ID" in p for p in problems)
    with pytest.raises(SystemExit) as exited:
        check_actions_file(load_settings())
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("cannot start: ACTIONS_FILE broken.yaml: tool ") == len(problems) and SECRET not in err


@pytest.mark.slow  # a new interpreter
def test_python_m_bot_actions_check(operator: Path) -> None:
    env = clean_env(SHOP_API_TOKEN=SECRET)
    done = subprocess.run(
        [sys.executable, "-m", "bot", "actions", "check", "broken.yaml"],
        cwd=operator,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2 and "tool cancel_order: confirm:" in done.stderr and SECRET not in done.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "bot", "actions", "check"], cwd=operator, env=env, capture_output=True, text=True
    )
    assert (ok.returncode, ok.stdout) == (0, "ok: 3 tools\n"), ok.stderr


def test_the_files_secrets_are_scrubbed_from_log_lines(operator: Path) -> None:
    """The second guard: a ${NAME} value of ACTIONS_FILE is among the values every log line is scrubbed of."""
    from bot.redaction import REDACTED, scrub, secret_values

    values = secret_values(load_settings())
    assert SECRET in values
    assert scrub(f"a library said: Authorization: Bearer {SECRET}", values) == (
        f"a library said: Authorization: Bearer {REDACTED}"
    )
