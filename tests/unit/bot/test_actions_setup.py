"""The composition root's actions (bot/actions_setup.py): none without ACTIONS_FILE, the checked
Catalog with the engine's limits with one, and a file with mistakes refused as a ConfigurationError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.actions_setup import NO_ACTIONS, build_actions
from bot.settings import BotSettings, Settings
from services.actions.settings import ActionsSettings
from services.backends.memory import InMemoryBackend
from services.core.errors import ConfigurationError

TOOL = {
    "description": "Status of one of the customer's orders",
    "risk": "read",
    "method": "GET",
    "url": "https://shop.example.com/api/orders/{order_id}",
    "params": {"order_id": {"type": "string", "pattern": "^[0-9]{4,12}$"}},
    "headers": {"X-Customer-Telegram-Id": "{customer.telegram_id}"},
    "result": ["status"],
}


def settings(path: Path | None, **actions: object) -> Settings:
    bot = BotSettings(_env_file=None, bot_token="123456:TEST")  # type: ignore[call-arg]
    options = ActionsSettings(_env_file=None, actions_file=str(path) if path else None, **actions)  # type: ignore[arg-type]
    return Settings(bot=bot, actions=options)  # type: ignore[call-arg]


def test_no_file_no_actions() -> None:
    assert build_actions(settings(None), InMemoryBackend().actions) is NO_ACTIONS
    assert NO_ACTIONS.options() == {}


async def test_a_file_gives_the_catalog_with_the_engine_limits(tmp_path: Path) -> None:
    path = tmp_path / "actions.yaml"
    path.write_text(json.dumps({"hosts": [{"host": "shop.example.com"}], "tools": {"order_status": TOOL}}))
    ledger = InMemoryBackend().actions
    built = build_actions(settings(path, actions_max_calls_per_turn=2, actions_confirm_seconds=30), ledger)
    options = built.options()
    assert list(options["actions"].names()) == ["order_status"] and options["ledger"] is ledger
    assert (options["actions_max_calls"], options["actions_confirm_seconds"]) == (2, 30)
    await built.close()


def test_a_file_with_mistakes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "actions.yaml"
    path.write_text(json.dumps({"hosts": [], "tools": {"order_status": TOOL}}))
    with pytest.raises(ConfigurationError, match="order_status"):
        build_actions(settings(path), InMemoryBackend().actions)
