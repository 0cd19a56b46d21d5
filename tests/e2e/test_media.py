"""End to end with media: real aiogram Bot/Dispatcher ↔ stub Bot API (getFile, file downloads), real
AsyncOpenAI ↔ stub model server (image parts, /audio/transcriptions), a real redis-server. A photo
with a caption answered (a data URL reaches the model; the bot token reaches nothing the model gets
and no log line), remembered by its note; an album as one turn; a voice note answered from its
transcript and paid for once; a PDF read; bad files refused with nothing stored."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiogram.types import Update
from fpdf import FPDF
from PIL import Image
from pypdf import PdfReader, PdfWriter
from redis.asyncio import Redis

from bot.backends import build_backend
from bot.factory import build_bot, build_dispatcher, build_engine
from bot.provider_health import ProviderWatch
from bot.telegram.albums import record_album_photo
from tests.conftest import RedisServer
from tests.e2e.harness import TOKEN, RunningBot, make_settings, start_bot
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram
from tests.stubs.vision import images_in

CHAT = 4242


def jpeg(width: int = 1600, height: int = 1200, color: tuple[int, int, int] = (180, 40, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "JPEG", quality=80)
    return buffer.getvalue()


def pdf(text: str) -> bytes:
    document = FPDF()
    document.add_page()
    document.set_font("helvetica", size=11)
    document.multi_cell(0, 6, text)
    return bytes(document.output())


async def stored(bot: RunningBot, chat_id: int = CHAT) -> list[str]:
    return [m.content for m in (await bot.store.load(chat_id)).messages]


@pytest.fixture
async def media_bot(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,  # flushed
    request: pytest.FixtureRequest,
) -> AsyncIterator[RunningBot]:
    options: dict[str, Any] = getattr(request, "param", {})
    settings = make_settings(telegram.base_url, stub_llm.base_url, redis_server.url, media=options)
    bot = await start_bot(settings)
    try:
        yield bot
    finally:
        await bot.stop()


async def test_a_photo_is_seen_once_remembered_by_its_note_and_the_token_goes_nowhere(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    stub_llm.image_note = lambda _image: "monitor stand cracked at the base, box intact"
    sent = telegram.push(telegram.photo_message(CHAT, jpeg(), width=1600, height=1200, caption="It arrived like this"))
    await telegram.wait_messages(CHAT, 1)
    [image] = images_in(stub_llm.chat_requests[-1])
    assert image.mime == "image/jpeg" and image.size is not None and max(image.size) <= 2048
    assert "It arrived like this" in json.dumps(stub_llm.chat_requests[-1])
    assert len(stub_llm.note_requests) == 1
    secret = TOKEN.split(":", 1)[1]
    everything_sent = json.dumps(stub_llm.requests)
    assert (
        secret not in everything_sent
        and "api.telegram.org" not in everything_sent
        and "/file/bot" not in everything_sent
    )
    assert not [r.getMessage() for r in caplog.records if secret in r.getMessage()]
    assert await stored(media_bot) == [
        "[photo: monitor stand cracked at the base, box intact]\nIt arrived like this",
        "Support answer to: [photo]\nIt arrived like this",  # the stub echoes the text part it got
    ]
    message = (await media_bot.store.load(CHAT)).messages[0]
    largest = sent["message"]["photo"][-1]["file_id"]
    assert [(ref.kind, ref.file_id) for ref in message.media] == [("photo", largest)]
    assert [d.status for d in telegram.files.downloads] == [200], "only the largest size is downloaded"
    telegram.send_text(CHAT, "Can you send a new one?")
    await telegram.wait_messages(CHAT, 2)
    follow_up = stub_llm.chat_requests[-1]
    assert images_in(follow_up) == [] and "monitor stand cracked at the base" in json.dumps(follow_up)


async def test_an_album_is_one_turn(media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI) -> None:
    for update in telegram.album(
        CHAT, [jpeg(color=(10, 10, 200)), jpeg(color=(10, 200, 10)), jpeg()], caption="3 boxes"
    ):
        telegram.push(update)
    telegram.send_text(CHAT, "thanks")  # answered after every photo of the album was handled
    await telegram.wait_messages(CHAT, 2)
    assert len(telegram.texts_to(CHAT)) == 2
    album_request, _ = stub_llm.chat_requests
    assert len(images_in(album_request)) == 3
    user, _, _, _ = await stored(media_bot)
    assert user.count("[photo: an image of") == 3 and user.endswith("3 boxes")


async def test_a_voice_note_is_answered_from_its_transcript_and_paid_for_once(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    stub_llm.transcriptions.default_text = "My order 7718 has not arrived."
    voice = telegram.voice_message(CHAT, b"OggS\x00fake-opus-bytes", duration=4)
    telegram.push(voice)
    await telegram.wait_messages(CHAT, 1)
    [call] = stub_llm.transcriptions.calls
    assert call.filename.endswith(".ogg") and call.file == b"OggS\x00fake-opus-bytes"
    assert "My order 7718 has not arrived." in json.dumps(stub_llm.chat_requests[-1])
    assert (await stored(media_bot))[0] == "[voice message, transcribed]: My order 7718 has not arrived."
    again = telegram.message_update(CHAT, None, extra={"voice": voice["message"]["voice"]})
    telegram.push(again)  # the same file sent again (a forward): its transcript is kept
    await telegram.wait_messages(CHAT, 2)
    assert len(stub_llm.transcriptions.calls) == 1


async def test_a_pdf_is_read(media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI) -> None:
    telegram.push(telegram.document_message(CHAT, pdf("Invoice 55-1207. Total: 349.00 EUR."), caption="wrong total?"))
    await telegram.wait_messages(CHAT, 1)
    prompt = json.dumps(stub_llm.chat_requests[-1])
    assert "Invoice 55-1207" in prompt and "wrong total?" in prompt
    [user, _] = await stored(media_bot)
    assert user.startswith("[document invoice.pdf, 1 pages]")


def encrypted_pdf() -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf("secret"))))
    writer.encrypt("pw")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


BAD_INPUTS = {
    "empty photo": (lambda t: t.photo_message(CHAT, b"", width=800, height=600), "could not open this file"),
    "corrupt photo": (lambda t: t.photo_message(CHAT, jpeg()[:200], width=800, height=600), "could not open"),
    "photo over 20 MB": (
        lambda t: t.photo_message(CHAT, jpeg(), size=21 * 2**20),
        "too big for me (the limit is 20 MB)",
    ),
    "huge caption": (lambda t: t.photo_message(CHAT, jpeg(), caption="order 7718 " * 500), "too long"),
    "voice too long": (lambda t: t.voice_message(CHAT, b"OggS", duration=3600), "too long"),
    "encrypted PDF": (lambda t: t.document_message(CHAT, encrypted_pdf()), "password-protected"),
    "corrupt PDF": (lambda t: t.document_message(CHAT, b"%PDF-1.4 broken"), "could not open"),
    "Word file": (
        lambda t: t.document_message(CHAT, b"PK\x03\x04", file_name="a.docx", mime_type="application/msword"),
        "cannot read this kind",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
async def test_bad_files_get_a_clear_reply_and_nothing_is_stored(
    case: str, media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    build, expected = BAD_INPUTS[case]
    telegram.push(build(telegram))
    [reply] = await telegram.wait_messages(CHAT, 1)
    assert expected in reply
    assert await stored(media_bot) == []
    assert stub_llm.chat_requests == []


async def test_an_unsupported_codec_and_a_model_without_vision(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    stub_llm.transcriptions.mode = "unsupported"
    telegram.push(telegram.voice_message(CHAT, b"not audio"))
    assert "cannot read this kind" in (await telegram.wait_messages(CHAT, 1))[-1]
    stub_llm.vision = False
    telegram.push(telegram.photo_message(CHAT, jpeg(), caption="see"))
    assert "describe in words what the photo shows" in (await telegram.wait_messages(CHAT, 2))[-1]
    assert await stored(media_bot) == []


@pytest.mark.parametrize("media_bot", [{"images_enabled": False, "voice_enabled": False}], indirect=True)
async def test_kinds_turned_off_keep_the_text_only_reply(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    telegram.push(telegram.photo_message(CHAT, jpeg()))
    telegram.push(telegram.voice_message(CHAT, b"OggS"))
    replies = await telegram.wait_messages(CHAT, 2)
    assert all("cannot read this kind of message" in reply for reply in replies)
    assert telegram.files.downloads == [] and stub_llm.transcriptions.calls == []


async def test_transient_failures_get_a_clear_reply_then_the_file_resent_is_answered(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    telegram.files.download_faults.extend([500, "cut"])
    telegram.push(telegram.photo_message(CHAT, jpeg(), caption="see"))
    assert "could not fetch your file" in (await telegram.wait_messages(CHAT, 1))[-1]
    telegram.push(telegram.photo_message(CHAT, jpeg(), caption="see"))
    assert "could not fetch your file" in (await telegram.wait_messages(CHAT, 2))[-1]
    stub_llm.transcriptions.outcomes.append("error")
    telegram.push(telegram.voice_message(CHAT, b"OggS\x00voice", duration=3))
    assert "temporarily unavailable" in (await telegram.wait_messages(CHAT, 3))[-1]
    assert await stored(media_bot) == [] and stub_llm.chat_requests == []
    telegram.push(telegram.voice_message(CHAT, b"OggS\x00voice", duration=3))
    await telegram.wait_messages(CHAT, 4)
    assert (await stored(media_bot))[0].startswith("[voice message, transcribed]: ")
    secret = TOKEN.split(":", 1)[1]
    assert secret not in caplog.text, "no log line, traceback included, holds the bot token"


async def test_a_photos_note_survives_compaction(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    settings = make_settings(
        telegram.base_url, stub_llm.base_url, redis_server.url, chat_input_token_budget=1100, summary_max_tokens=300
    )
    bot = await start_bot(settings)
    try:
        stub_llm.image_note = lambda _image: "the serial sticker reads SN-48213, the stand is cracked at the base"
        telegram.push(telegram.photo_message(CHAT, jpeg(), caption="the stand I got"))
        await telegram.wait_messages(CHAT, 1)
        for n in range(12):
            telegram.send_text(CHAT, f"Another detail number {n}: the box was dented on the {n}th side, see above.")
            await telegram.wait_messages(CHAT, n + 2)
        session = await bot.store.load(CHAT)
        assert stub_llm.summary_requests and session.summary is not None, "the small budget forced a compaction"
        assert all("SN-48213" not in m.content for m in session.messages), "the photo's turn was folded"
        assert "SN-48213" in json.dumps(stub_llm.chat_requests[-1]), "its note lives on in the summary"
        assert all(images_in(request) == [] for request in stub_llm.chat_requests[1:])
    finally:
        await bot.stop()


async def test_the_ticket_says_what_the_photo_and_voice_note_said_and_shows_them(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    group = -1001234567890
    settings = make_settings(telegram.base_url, stub_llm.base_url, redis_server.url, bot={"operator_chat_id": group})
    bot = await start_bot(settings)
    try:
        stub_llm.image_note = lambda _image: "monitor stand cracked at the base, serial SN-48213"
        stub_llm.transcriptions.default_text = "Please call me back about order 7718."
        photo = telegram.push(telegram.photo_message(CHAT, jpeg(), caption="the crack"))
        await telegram.wait_messages(CHAT, 1)
        voice = telegram.push(telegram.voice_message(CHAT, b"OggS\x00call-me", duration=3))
        await telegram.wait_messages(CHAT, 2)
        telegram.send_text(CHAT, "/operator")
        await telegram.wait_for(lambda: bool(telegram.topics))
        (thread,) = telegram.topics
        await telegram.wait_for(lambda: len(telegram.in_topic(thread, "sendVoice")) == 1)
        ticket = "\n".join(c.params["text"] for c in telegram.in_topic(thread, "sendMessage"))
        assert "SN-48213" in ticket and "call me back about order 7718" in ticket
        [shown_photo] = telegram.in_topic(thread, "sendPhoto")
        [shown_voice] = telegram.in_topic(thread, "sendVoice")
        assert shown_photo.params["photo"] == photo["message"]["photo"][-1]["file_id"]
        assert shown_voice.params["voice"] == voice["message"]["voice"]["file_id"]
    finally:
        await bot.stop()


def album_of_sizes(telegram: StubTelegram, sizes: list[int | None], caption: str = "") -> list[dict[str, Any]]:
    """An album whose photos' getFile sizes are ``sizes`` (None: the real size)."""
    group = f"9{CHAT}{len(telegram.updates):06d}"
    return [
        telegram.photo_message(CHAT, jpeg(), size=size, media_group_id=group, caption=caption if i == 0 else None)
        for i, size in enumerate(sizes)
    ]


@pytest.mark.parametrize("big", [0, 1], ids=["first photo too big", "second photo too big"])
async def test_an_album_with_a_photo_over_the_limit_is_refused_once(
    big: int, media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    sizes: list[int | None] = [None, None, None]
    sizes[big] = 21 * 2**20
    for update in album_of_sizes(telegram, sizes, caption="broken"):
        telegram.push(update)
    telegram.send_text(CHAT, "thanks")  # answered after every photo of the album was handled
    await telegram.wait_for(lambda: any("Support answer to" in t for t in telegram.texts_to(CHAT)))
    refusals = [t for t in telegram.texts_to(CHAT) if "too big" in t]
    assert len(refusals) == 1, telegram.texts_to(CHAT)
    assert len(telegram.texts_to(CHAT)) == 2


async def test_a_recording_the_provider_finds_too_long_names_no_made_up_limit(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    stub_llm.transcriptions.mode = "too_long"  # within VOICE_MAX_SECONDS, over what the model takes
    telegram.push(telegram.voice_message(CHAT, b"OggS\x00fake-opus-bytes", duration=60))
    telegram.push(telegram.voice_message(CHAT, b"OggS\x00fake-opus-bytes", duration=60, language="ru"))
    english, russian = await telegram.wait_messages(CHAT, 2)
    assert "too long" in english and "Запись слишком длинная" in russian
    assert " 0 " not in english and " 0 " not in russian, (english, russian)


async def test_a_document_of_a_type_not_read_is_refused_before_its_download(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    archive = telegram.document_message(
        CHAT, b"PK\x03\x04" + b"\x00" * 4096, file_name="logs.zip", mime_type="application/zip", size=15 * 2**20
    )
    telegram.push(archive)
    [reply] = await telegram.wait_messages(CHAT, 1)
    assert "cannot read this kind" in reply
    assert telegram.files.downloads == [] and not telegram.of("getFile"), "refused by its name and type alone"


async def test_a_redelivered_photo_update_already_answered_is_not_read_again(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    sent = telegram.push(telegram.photo_message(CHAT, jpeg(), caption="broken"))
    await telegram.wait_messages(CHAT, 1)
    await telegram.wait_for(lambda: len(stub_llm.note_requests) == 1)
    downloads = len(telegram.files.downloads)
    telegram.files.download_faults.append(404)  # the file is gone by the time the update comes back
    update = Update.model_validate(sent, context={"bot": media_bot.bot})
    await media_bot.dispatcher.feed_update(media_bot.bot, update)  # as a queue worker redelivers it
    assert len(telegram.files.downloads) == downloads, "an answered turn downloads nothing"
    assert len(telegram.texts_to(CHAT)) == 1, telegram.texts_to(CHAT)


async def test_an_album_whose_captions_are_too_long_is_refused_before_any_download(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    group = "77700011"
    for n in range(3):  # each caption within Telegram's limit, together over MAX_MESSAGE_CHARS
        telegram.push(telegram.photo_message(CHAT, jpeg(), caption=f"{n} " + "x" * 2000, media_group_id=group))
    [reply] = await telegram.wait_messages(CHAT, 1)
    assert "too long" in reply
    assert telegram.files.downloads == [] and stub_llm.chat_requests == []


async def test_an_album_counts_once_against_the_rate_limit(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    settings = make_settings(telegram.base_url, stub_llm.base_url, redis_server.url, bot={"rate_limit_per_minute": 3})
    bot = await start_bot(settings)
    try:
        for update in telegram.album(CHAT, [jpeg(), jpeg(), jpeg(), jpeg()], caption="4 boxes"):
            telegram.push(update)
        telegram.send_text(CHAT, "thanks")
        replies = await telegram.wait_messages(CHAT, 2)
        assert not [t for t in replies if "too fast" in t], replies
        assert len(replies) == 2 and len(stub_llm.chat_requests) == 2
    finally:
        await bot.stop()


async def test_in_a_group_a_photo_is_addressed_by_a_mention_in_its_caption(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    group = -100778
    caption = "@support_test_bot is this damage covered?"
    mention = [{"type": "mention", "offset": 0, "length": len("@support_test_bot")}]
    telegram.push(telegram.photo_message(group, jpeg(), caption="look at my cat", chat_type="supergroup"))
    addressed = telegram.photo_message(group, jpeg(), caption=caption, chat_type="supergroup")
    addressed["message"]["caption_entities"] = mention
    telegram.push(addressed)
    await telegram.wait_messages(group, 1)
    assert len(stub_llm.chat_requests) == 1, "only the photo addressed to the bot is answered"
    text = json.dumps(stub_llm.chat_requests[-1]["messages"][-1])
    assert "is this damage covered?" in text and "@support_test_bot" not in text


async def test_an_album_queued_behind_a_forget_is_still_one_turn(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    """Queued mode: the intake records each album photo on arrival; the worker runs /forget (queued
    just before the album), then the album's updates one by one."""
    album = telegram.album(CHAT, [jpeg(), jpeg(), jpeg()], caption="3 boxes")  # built, not pushed
    for update in album:
        await record_album_photo(media_bot.backend.albums, update)  # as the intake does
    await media_bot.backend.forget_chat(CHAT)  # the /forget queued before the album
    for update in album:  # as the chat's worker feeds them, in order
        parsed = Update.model_validate(update, context={"bot": media_bot.bot})
        await media_bot.dispatcher.feed_update(media_bot.bot, parsed)
    assert len(stub_llm.chat_requests) == 1, telegram.texts_to(CHAT)


async def test_a_dispatcher_built_without_a_media_reader_keeps_the_text_only_reply(
    telegram: StubTelegram, stub_llm: StubOpenAI, redis_server: RedisServer, real_redis: Redis
) -> None:
    """``build_dispatcher(media=None)`` is allowed (its default): aiogram then injects None where the
    handler's annotation promises a MediaReader."""
    settings = make_settings(telegram.base_url, stub_llm.base_url, redis_server.url)
    backend = build_backend(settings)
    provider = ProviderWatch()
    chat = build_engine(settings, backend, provider=provider)
    dispatcher = build_dispatcher(chat, settings.bot, backend=backend, provider=provider)
    bot = RunningBot(settings, backend, chat, build_bot(settings.bot), dispatcher)
    await bot.start()
    try:
        telegram.push(telegram.photo_message(CHAT, jpeg()))
        [reply] = await telegram.wait_messages(CHAT, 1)
        assert "cannot read this kind of message" in reply
    finally:
        await bot.stop()


async def test_an_album_of_images_sent_as_files_keeps_them_files(
    media_bot: RunningBot, telegram: StubTelegram, stub_llm: StubOpenAI
) -> None:
    """The operators are shown a ticket's files by kind: a document's file id cannot be sent as a photo."""
    group = "55500011"
    for n in range(2):
        update = telegram.document_message(CHAT, jpeg(), file_name=f"shot{n}.jpg", mime_type="image/jpeg")
        update["message"]["media_group_id"] = group
        telegram.push(update)
    telegram.send_text(CHAT, "thanks")
    await telegram.wait_messages(CHAT, 2)
    user = (await media_bot.store.load(CHAT)).messages[0]
    assert [ref.kind for ref in user.media] == ["image_file", "image_file"]
