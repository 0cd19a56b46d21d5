"""End to end: four chats send a large PNG as a file at the same time (real aiogram ↔ stub Bot API,
real AsyncOpenAI ↔ stub model server, a real redis-server, the bot in this process). Two PNGs are
just under the decoded-bytes budget (25 MP RGBA, 107 kB, 100 MB decoded) and are answered; two are
40 MP RGBA (165 kB, 160 MB decoded) and are refused as too big. Every chat gets its reply, and the
process's peak resident set (VmHWM, reset through /proc/self/clear_refs once the files are made)
rises by less than 400 MB: before the budget the same four files took about 2 GB."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image
from redis.asyncio import Redis

from tests.conftest import RedisServer
from tests.e2e.harness import RunningBot, make_settings, start_bot
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

CHATS = (5101, 5102, 5103, 5104)
STATUS = Path("/proc/self/status")


def png(size: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGBA", size, (10, 200, 30, 128)).save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def status_kb(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", STATUS.read_text(), re.MULTILINE)
    assert match is not None
    return int(match.group(1))


def reset_peak() -> bool:
    """Start VmHWM afresh at the current resident set (Linux 4.0+); False where that is not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@pytest.fixture
async def image_bot(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> AsyncIterator[RunningBot]:
    bot = await start_bot(make_settings(telegram.base_url, stub_llm.base_url, redis_server.url))
    try:
        yield bot
    finally:
        await bot.stop()


@pytest.mark.skipif(not STATUS.exists(), reason="reads the peak resident set from /proc (Linux)")
async def test_four_large_pngs_at_once_each_get_a_reply_within_the_memory_bound(
    image_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    at_budget, over_budget = png((5000, 5000)), png((6400, 6200))
    assert len(at_budget) < 200_000 and len(over_budget) < 200_000
    files = dict(zip(CHATS, (at_budget, over_budget, at_budget, over_budget), strict=True))
    if not reset_peak():
        pytest.skip("/proc/self/clear_refs is not writable here")
    before = status_kb("VmRSS")
    for chat, data in files.items():
        message = telegram.document_message(chat, data, file_name=f"scan{chat}.png", mime_type="image/png")
        telegram.push(message)
    replies = await asyncio.gather(*(telegram.wait_messages(chat, 1, within=120.0) for chat in CHATS))
    peak_mb = (status_kb("VmHWM") - before) / 1024
    assert all(texts for texts in replies), "every chat got a reply"
    assert peak_mb < 400, f"four large PNGs at once raised the peak resident set by {peak_mb:.0f} MB"
    for chat, texts in zip(CHATS, replies, strict=True):
        if files[chat] is over_budget:
            assert texts[-1].startswith("This file is too big for me."), texts
        else:
            assert texts[-1].startswith("Support answer to:"), texts
