"""The optional speed-ups: chosen when installed, each can be turned off by an environment variable."""

import asyncio
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from bot.factory import build_bot
from bot.serving.fastpath import install_event_loop, json_codec
from bot.settings import BotSettings


def test_event_loop_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVENT_LOOP", "asyncio")
    before = asyncio.get_event_loop_policy()
    assert install_event_loop() == "asyncio"
    assert asyncio.get_event_loop_policy() is before


def test_json_codec_round_trips_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    loads, dumps, name = json_codec()
    assert name == ("orjson" if importlib.util.find_spec("orjson") else "json")
    value = {"text": "Привет <b>", "n": [1, 2.5, None, True]}
    assert loads(dumps(value)) == value and isinstance(dumps(value), str)
    assert loads('{"text": "a\\ud800b"}') == {"text": "a\ud800b"}, "lone surrogates are valid JSON"
    monkeypatch.setenv("JSON_CODEC", "json")
    assert json_codec() == (json.loads, json.dumps, "json")


async def test_bot_session_uses_the_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_TOKEN", "123456:" + "A" * 35)
    bot = build_bot(BotSettings(_env_file=None))  # type: ignore[call-arg]
    try:
        assert bot.session.json_loads('{"text": "a\\ud800b"}') == {"text": "a\ud800b"}
        assert bot.session.json_dumps({"n": 1}).replace(" ", "") == '{"n":1}'
    finally:
        await bot.session.close()


@pytest.mark.slow  # a new interpreter
@pytest.mark.parametrize(("setting", "frozen"), [(None, True), ("off", False)])
def test_the_startup_heap_is_frozen_unless_turned_off(setting: str | None, frozen: bool) -> None:
    """In a process of its own: a frozen heap stays frozen."""
    env = {k: v for k, v in os.environ.items() if k != "GC_FREEZE"} | ({"GC_FREEZE": setting} if setting else {})
    code = (
        "import gc, bot.factory\n"
        "from bot.serving.fastpath import freeze_startup_heap\n"
        "count = freeze_startup_heap()\n"
        "print(count, gc.get_freeze_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    count, in_permanent = map(int, out.split())
    assert count == in_permanent
    assert (count > 10_000) is frozen and (count == 0) is not frozen
