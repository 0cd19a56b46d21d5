"""bot.telegram.files.downloader against the stub Bot API: what a failed download raises, and that no
exception it raises carries the file URL (which holds the bot token), even in a logged traceback."""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections import deque
from collections.abc import AsyncIterator

import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer

from bot.telegram import files
from bot.telegram.files import DownloadFailedError, downloader
from services.core import media_reasons as reasons
from services.core.errors import MediaError
from tests.stubs.telegram_server import StubTelegram

TOKEN = "123456:DOWNLOAD-secret-token"
SECRET = TOKEN.split(":", 1)[1]


@pytest.fixture
async def bot(telegram: StubTelegram) -> AsyncIterator[Bot]:
    bot = Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(telegram.base_url)))
    yield bot
    await bot.session.close()


def logged(exc: BaseException) -> str:
    """What ``log.exception`` / ``exc_info=`` would write for ``exc`` (the whole chain, as shown)."""
    return "".join(traceback.format_exception(exc))


def chain(exc: BaseException | None) -> str:
    """Every exception reachable from ``exc`` (cause and context, shown or not), as text."""
    seen: list[str] = []
    while exc is not None and len(seen) < 10:
        seen.append(f"{exc!r} {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(seen)


@pytest.mark.parametrize("fault", [404, 403, 500, 502, "cut"])
async def test_a_failed_download_carries_no_file_url(
    fault: int | str, telegram: StubTelegram, bot: Bot, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    telegram.add_file("AgAC-photo", b"\xff\xd8" + b"x" * 200_000, folder="photos", extension="jpg")
    telegram.files.download_faults.append(fault)  # type: ignore[arg-type]
    with pytest.raises((MediaError, DownloadFailedError)) as raised:
        await downloader(bot, "image")("AgAC-photo", 20 * 2**20)
    if fault in (404, 403):
        assert isinstance(raised.value, MediaError) and raised.value.reason == reasons.UNREADABLE
    else:
        assert isinstance(raised.value, DownloadFailedError)
    assert SECRET not in logged(raised.value)
    assert SECRET not in chain(raised.value)
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


async def test_a_file_larger_than_get_file_said_is_cut_off_at_the_cap(telegram: StubTelegram, bot: Bot) -> None:
    telegram.add_file("BQAC-doc", b"a" * 50_000, size=1_000)  # getFile says 1 kB
    with pytest.raises(MediaError) as raised:
        await downloader(bot, "document")("BQAC-doc", 10_000)
    assert raised.value.reason == reasons.TOO_BIG and raised.value.limit == 10_000
    assert SECRET not in logged(raised.value)


async def test_get_file_failing_on_telegrams_side_is_a_failed_download(telegram: StubTelegram, bot: Bot) -> None:
    """Issue 36: a 5xx from getFile is the file not fetched (the customer told, the download tried
    again), not an error of the chat."""
    telegram.add_file("AgAC-photo", b"\xff\xd8" + b"x" * 1000, folder="photos", extension="jpg")
    telegram.faults["getFile"] = deque([{"error_code": 502, "description": "Bad Gateway"}])
    with pytest.raises(DownloadFailedError) as raised:
        await downloader(bot, "image")("AgAC-photo", 20 * 2**20)
    assert SECRET not in logged(raised.value) and SECRET not in chain(raised.value)


async def test_a_hanging_file_server_fails_the_download_in_seconds(
    telegram: StubTelegram, bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: the customer hears within seconds that the file could not be fetched, so a file server
    that accepts the request and never answers fails the attempt after the stall limit, not after the
    whole download's minute (shortened here: the limit is the bot's own constant)."""
    monkeypatch.setattr(files, "DOWNLOAD_STALL_SECONDS", 0.5)
    telegram.add_file("AgAC-photo", b"\xff\xd8" + b"x" * 1000, folder="photos", extension="jpg")
    telegram.files.download_faults.append("hang")
    with pytest.raises(DownloadFailedError):
        await asyncio.wait_for(downloader(bot, "image")("AgAC-photo", 20 * 2**20), 30)


async def test_a_crawling_download_is_told_of_while_it_goes_on(telegram: StubTelegram, bot: Bot) -> None:
    """Issue 36: a file server that sends a byte every half second never trips the stall limit, so the
    notice cannot wait for the download to fail: ``on_slow`` runs once the download is slow, and the
    download still completes afterwards."""
    data = b"\xff\xd8" + b"x" * 50
    telegram.add_file("AgAC-photo", data, folder="photos", extension="jpg")
    telegram.files.download_faults.append("trickle")
    told = asyncio.Event()

    async def on_slow() -> None:
        told.set()
        telegram.files.trickle_ends.set()  # the server speeds up only once the customer was told

    download = downloader(bot, "image", on_slow=on_slow, slow_after=0.2)
    assert await asyncio.wait_for(download("AgAC-photo", 20 * 2**20), 30) == data
    assert told.is_set()


async def test_a_quick_download_tells_nothing(telegram: StubTelegram, bot: Bot) -> None:
    telegram.add_file("AgAC-photo", b"\xff\xd8" + b"x" * 50, folder="photos", extension="jpg")

    async def on_slow() -> None:
        raise AssertionError("told of a download that was not slow")

    assert await downloader(bot, "image", on_slow=on_slow, slow_after=30)("AgAC-photo", 20 * 2**20)
