"""Telegram's side of a customer's files: what a message carries (``incoming_of``) and the download
(``downloader``): getFile's size checked against the cap, the bytes read into memory, never past it.

The file URL aiogram builds holds the bot token: it stays inside aiogram's session (never logged,
stored or passed on here); the services get bytes. A download Telegram fails on its side is
``DownloadFailedError`` (retried, the customer told: ``handlers.errors``); a file Telegram no longer
has, or will not serve, is the customer's to resend at once."""

from __future__ import annotations

import io
import logging
from collections.abc import Awaitable, Callable

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramNetworkError, TelegramServerError
from aiogram.types import File, Message
from aiohttp import ClientError, ClientResponseError, ClientTimeout

from bot.telegram.download_notice import DOWNLOAD_NOTICE_SECONDS, told_if_slow
from services.core import media_reasons as reasons
from services.core.errors import MediaError, TransientError
from services.media.reader import Download, Incoming, IncomingKind

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_SECONDS = 60
"""The most one download may take (20 MB at a third of a MB/s)."""
DOWNLOAD_STALL_SECONDS = 10.0
"""The most a download may wait for a connection, or for its next bytes (the headers included): a file
server that hangs fails the attempt in seconds (the customer hears of a slow file sooner still:
``download_notice``)."""


class DownloadFailedError(TransientError):
    """Telegram's file server could not be reached or cut the download: tried again later."""


class _Capped(io.BytesIO):
    """A buffer that refuses to grow past ``cap`` bytes (a file larger than getFile said)."""

    def __init__(self, cap: int, kind: reasons.MediaKind) -> None:
        super().__init__()
        self._cap = cap
        self._kind = kind

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.tell() + len(data) > self._cap:
            raise MediaError(
                f"download over {self._cap} bytes", kind=self._kind, reason=reasons.TOO_BIG, limit=self._cap
            )
        return super().write(data)


def downloader(
    bot: Bot,
    kind: reasons.MediaKind,
    on_slow: Callable[[], Awaitable[None]] | None = None,
    slow_after: float = DOWNLOAD_NOTICE_SECONDS,
) -> Download:
    """Downloads of ``kind``; ``on_slow`` runs when one (getFile included) is not done after ``slow_after``
    seconds, the download going on meanwhile (the customer's notice: ``download_notice``)."""

    async def download(file_id: str, max_bytes: int) -> bytes:
        if on_slow is None:
            return await _download(bot, kind, file_id, max_bytes)
        return await told_if_slow(_download(bot, kind, file_id, max_bytes), on_slow, slow_after)

    return download


async def _download(bot: Bot, kind: reasons.MediaKind, file_id: str, max_bytes: int) -> bytes:
    """One download: getFile, its size against the cap, then the bytes (never past the cap)."""
    file = await _file_of(bot, file_id, kind, max_bytes)
    if file.file_size is not None and file.file_size > max_bytes:
        raise MediaError(f"{file.file_size} bytes", kind=kind, reason=reasons.TOO_BIG, limit=max_bytes)
    if not file.file_path:
        raise MediaError("getFile gave no file path", kind=kind, reason=reasons.UNREADABLE)
    buffer = _Capped(max_bytes, kind)
    failure: Exception | None = None
    # aiogram types ``timeout`` as seconds but hands it to aiohttp's ``session.get``, which takes a
    # ClientTimeout: the total alone would let a hanging server hold the attempt for a minute
    timeout = ClientTimeout(
        total=DOWNLOAD_TIMEOUT_SECONDS, sock_connect=DOWNLOAD_STALL_SECONDS, sock_read=DOWNLOAD_STALL_SECONDS
    )
    try:
        await bot.download_file(file.file_path, destination=buffer, timeout=timeout)  # type: ignore[arg-type]
    except ClientResponseError as exc:
        failure = _refused(exc.status, kind)
    except (ClientError, TimeoutError, OSError) as exc:
        failure = DownloadFailedError(f"download failed: {type(exc).__name__}")
    if failure is not None:  # raised outside the except: aiohttp's error (the URL, the token) is no context
        raise failure
    return buffer.getvalue()


async def _file_of(bot: Bot, file_id: str, kind: reasons.MediaKind, max_bytes: int) -> File:
    """getFile's answer; Telegram failing on its side is a failed download (tried again, the customer
    told), a refusal is the customer's file (too big, gone)."""
    failure: Exception | None = None
    try:
        return await bot.get_file(file_id)
    except TelegramBadRequest as exc:
        big = "too big" in exc.message.lower()
        reason = reasons.TOO_BIG if big else reasons.UNREADABLE
        failure = MediaError(f"getFile refused: {exc.message}", kind=kind, reason=reason, limit=max_bytes)
    except (TelegramServerError, TelegramNetworkError) as exc:
        failure = DownloadFailedError(f"getFile failed: {type(exc).__name__}")
    raise failure  # outside the except, as for the download: no library error as context


def _refused(status: int, kind: reasons.MediaKind) -> Exception:
    if 400 <= status < 500 and status not in (408, 429):
        return MediaError(f"file server answered {status}", kind=kind, reason=reasons.UNREADABLE)
    return DownloadFailedError(f"file server answered {status}")


def incoming_of(message: Message) -> list[Incoming]:
    """The files of a message the bot may read (the largest photo size: the reader shrinks it)."""
    if message.photo:
        best = message.photo[-1]
        return [Incoming("photo", best.file_id, best.file_unique_id, best.file_size)]
    if (voice := message.voice) is not None:
        return [
            Incoming("voice", voice.file_id, voice.file_unique_id, voice.file_size, voice.duration, voice.mime_type)
        ]
    if (audio := message.audio) is not None:
        name = audio.file_name
        return [
            Incoming(
                "audio", audio.file_id, audio.file_unique_id, audio.file_size, audio.duration, audio.mime_type, name
            )
        ]
    if (note := message.video_note) is not None:
        return [Incoming("video_note", note.file_id, note.file_unique_id, note.file_size, note.duration, "video/mp4")]
    if (document := message.document) is not None:
        mime = (document.mime_type or "").lower()
        kind: IncomingKind = "image_file" if mime.startswith("image/") else "document"
        size, name = document.file_size, document.file_name
        return [Incoming(kind, document.file_id, document.file_unique_id, size, None, mime, name)]
    return []
