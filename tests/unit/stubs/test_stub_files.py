"""The stub Bot API's getFile and file downloads, used by a real aiogram ``Bot`` as it uses Telegram's."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramBadRequest
from aiogram.types import Update

from tests.stubs.files import DOWNLOAD_LIMIT, photo_sizes
from tests.stubs.telegram_server import StubTelegram

TOKEN = "123456:STUB-FILES-TOKEN"
CHAT = 5005
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40 + b"\xff\xd9"
OGG = b"OggS\x00\x02" + b"\x01" * 3000


@pytest.fixture
async def telegram() -> AsyncIterator[StubTelegram]:
    stub = StubTelegram()
    await stub.start()
    yield stub
    await stub.stop()


@pytest.fixture
async def bot(telegram: StubTelegram) -> AsyncIterator[Bot]:
    session = AiohttpSession(api=TelegramAPIServer.from_base(telegram.base_url))
    bot = Bot(TOKEN, session=session)
    yield bot
    await bot.session.close()


def message_of(update: dict[str, object], bot: Bot) -> object:
    parsed = Update.model_validate(update, context={"bot": bot})
    assert parsed.message is not None
    return parsed.message


async def test_get_file_answers_the_file_and_download_serves_its_bytes(telegram: StubTelegram, bot: Bot) -> None:
    stored = telegram.add_file("BQAC-invoice", b"%PDF-1.7 invoice", folder="documents", extension="pdf")
    file = await bot.get_file("BQAC-invoice")
    assert (file.file_id, file.file_unique_id, file.file_size) == ("BQAC-invoice", stored.file_unique_id, 16)
    assert file.file_path == stored.file_path and file.file_path.startswith("documents/file_")
    assert file.file_path.endswith(".pdf")
    downloaded = await bot.download("BQAC-invoice")
    assert isinstance(downloaded, io.BytesIO) and downloaded.read() == b"%PDF-1.7 invoice"
    assert [c.method for c in telegram.calls] == ["getFile", "getFile"]  # download() asks getFile itself
    [download] = telegram.files.downloads
    assert (download.file_path, download.status) == (stored.file_path, 200)
    assert download.token == TOKEN  # the file URL carries the bot token: it must never leave the bot


async def test_a_photo_is_a_list_of_sizes_and_the_largest_downloads(telegram: StubTelegram, bot: Bot) -> None:
    update = telegram.photo_message(CHAT, JPEG, width=1600, height=1200, caption="cracked stand", thumbnails=b"t")
    message = message_of(update, bot)
    photo = message.photo  # type: ignore[attr-defined]
    assert [(p.width, p.height) for p in photo] == [(90, 67), (320, 240), (800, 600), (1280, 960), (1600, 1200)]
    assert len({p.file_id for p in photo}) == len({p.file_unique_id for p in photo}) == 5
    assert message.caption == "cracked stand"  # type: ignore[attr-defined]
    assert photo[-1].file_size == len(JPEG)
    destination = io.BytesIO()
    await bot.download(photo[-1], destination=destination)
    assert destination.getvalue() == JPEG
    assert (await bot.download(photo[0])).read() == b"t"  # type: ignore[union-attr]
    assert telegram.files.downloaded(photo[-1].file_id)[0].file_path.startswith("photos/")


def test_photo_sizes_follow_telegrams_standard_sides() -> None:
    assert photo_sizes(640, 480) == [(90, 67), (320, 240), (640, 480)]
    assert photo_sizes(80, 60) == [(80, 60)]
    assert photo_sizes(4000, 3000)[-1] == (2560, 1920)  # a bigger photo is kept at 2560 at most
    assert photo_sizes(1000, 4000)[-1] == (640, 2560)


async def test_a_file_over_20_mb_is_refused_as_too_big(telegram: StubTelegram, bot: Bot) -> None:
    telegram.add_file("BQAC-huge", b"x", size=DOWNLOAD_LIMIT + 1)
    telegram.add_file("BQAC-limit", b"y", size=DOWNLOAD_LIMIT)
    with pytest.raises(TelegramBadRequest, match="Bad Request: file is too big"):
        await bot.get_file("BQAC-huge")
    assert (await bot.get_file("BQAC-limit")).file_size == DOWNLOAD_LIMIT
    with pytest.raises(TelegramBadRequest, match="file is too big"):
        await bot.download("BQAC-huge")
    assert telegram.files.downloads == []


async def test_an_unknown_file_id_is_invalid(telegram: StubTelegram, bot: Bot) -> None:
    with pytest.raises(TelegramBadRequest, match="Bad Request: invalid file_id"):
        await bot.get_file("no-such-file")


async def test_an_unknown_path_is_not_found(telegram: StubTelegram, bot: Bot) -> None:
    with pytest.raises(aiohttp.ClientResponseError) as raised:
        await bot.download_file("photos/file_999.jpg")
    assert raised.value.status == 404
    assert [d.status for d in telegram.files.downloads] == [404]


async def test_download_faults(telegram: StubTelegram, bot: Bot) -> None:
    telegram.add_file("AgAC-photo", JPEG, folder="photos", extension="jpg")
    telegram.files.download_faults.extend([500, "cut", "hang"])
    with pytest.raises(aiohttp.ClientResponseError) as raised:
        await bot.download("AgAC-photo")
    assert raised.value.status == 500
    with pytest.raises(aiohttp.ClientPayloadError):  # half the body, then the connection drops
        await bot.download("AgAC-photo")
    with pytest.raises(asyncio.TimeoutError):  # the download hangs: the caller's timeout ends it
        await bot.download("AgAC-photo", timeout=1)
    # and the next call gets through (aiohttp 3.9.0 reused the timed-out connection: aio-libs/aiohttp#7864)
    assert (await bot.download("AgAC-photo")).read() == JPEG  # type: ignore[union-attr]
    assert [d.status for d in telegram.files.downloads] == [500, 200, 200, 200]


async def test_voice_audio_video_note_and_document_messages(telegram: StubTelegram, bot: Bot) -> None:
    voice = message_of(telegram.voice_message(CHAT, OGG, duration=7), bot).voice  # type: ignore[attr-defined]
    assert (voice.duration, voice.mime_type, voice.file_size) == (7, "audio/ogg", len(OGG))
    assert (await bot.get_file(voice.file_id)).file_path.endswith(".oga")  # type: ignore[union-attr]
    assert (await bot.download(voice)).read() == OGG  # type: ignore[union-attr]

    audio = message_of(telegram.audio_message(CHAT, b"ID3", file_name="call.mp3"), bot).audio  # type: ignore[attr-defined]
    assert (audio.file_name, audio.mime_type, audio.duration) == ("call.mp3", "audio/mpeg", 30)

    note = message_of(telegram.video_note_message(CHAT, b"mp4", duration=4), bot).video_note  # type: ignore[attr-defined]
    assert (note.duration, note.length) == (4, 240)
    assert (await bot.download(note)).read() == b"mp4"  # type: ignore[union-attr]

    update = telegram.document_message(CHAT, b"%PDF-1.4", file_name="invoice.pdf", caption="my invoice")
    message = message_of(update, bot)
    document = message.document  # type: ignore[attr-defined]
    assert (document.file_name, document.mime_type, message.caption) == (  # type: ignore[attr-defined]
        "invoice.pdf", "application/pdf", "my invoice",
    )  # fmt: skip
    assert (await bot.download(document)).read() == b"%PDF-1.4"  # type: ignore[union-attr]
    image = message_of(telegram.document_message(CHAT, JPEG, file_name="s.png", mime_type="image/png"), bot)
    assert image.document.mime_type == "image/png"  # type: ignore[attr-defined]


async def test_an_album_is_photos_sharing_a_media_group(telegram: StubTelegram, bot: Bot) -> None:
    updates = telegram.album(CHAT, [b"one", b"two", b"three"], caption="all three sides")
    messages = [message_of(update, bot) for update in updates]
    groups = {m.media_group_id for m in messages}  # type: ignore[attr-defined]
    assert len(groups) == 1 and None not in groups
    assert [m.caption for m in messages] == ["all three sides", None, None]  # type: ignore[attr-defined]
    assert len({m.message_id for m in messages}) == 3  # type: ignore[attr-defined]
    assert [(await bot.download(m.photo[-1])).read() for m in messages] == [b"one", b"two", b"three"]  # type: ignore[attr-defined, union-attr]
    assert len({u["update_id"] for u in updates}) == 3


async def test_media_updates_reach_a_polling_bot(telegram: StubTelegram, bot: Bot) -> None:
    pushed = telegram.push(telegram.voice_message(CHAT, OGG))
    [update] = await bot.get_updates(offset=0, timeout=0)
    assert update.update_id == pushed["update_id"] and update.message is not None
    assert update.message.voice is not None and update.message.voice.file_id == pushed["message"]["voice"]["file_id"]
