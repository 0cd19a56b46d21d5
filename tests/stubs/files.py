"""Files on the stub Bot API: ``getFile`` and ``GET /file/bot<token>/<file_path>``, as Telegram serves them.

A test registers bytes (``add_file``, or the media builders that do it for it); ``getFile`` answers a
``File`` (file_id, file_unique_id, file_size, file_path) or Telegram's errors ("Bad Request: invalid
file_id", "Bad Request: file is too big" over the 20 MB a bot may download); the download route serves
the bytes and records every download (path, token, status). Download faults: an HTTP status, ``cut``
(half the body, then the connection drops), ``hang`` (until the stub stops) or ``trickle`` (a byte every
half second, never silent long enough for a stall timeout, until ``trickle_ends`` is set; then the
rest). ``MediaUpdates`` builds photo (PhotoSize list, as Telegram sizes it), album, voice, audio, video
note and document updates.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

DOWNLOAD_LIMIT = 20 * 1024 * 1024
"""The largest file a bot may download from the Bot API (getFile refuses bigger ones)."""
PHOTO_SIDES = (90, 320, 800, 1280, 2560)
"""The longest sides of the sizes Telegram makes of a photo (s, m, x, y, w)."""

DownloadFault = int | Literal["cut", "hang", "trickle"]


@dataclass
class StubFile:
    file_id: str
    file_unique_id: str
    data: bytes
    file_path: str
    size: int
    """The size getFile reports (``len(data)`` unless a test claims more, e.g. a 25 MB file)."""

    def as_file(self) -> dict[str, Any]:
        """The Bot API ``File`` object."""
        return {
            "file_id": self.file_id,
            "file_unique_id": self.file_unique_id,
            "file_size": self.size,
            "file_path": self.file_path,
        }


@dataclass
class Download:
    file_path: str
    token: str
    status: int
    at: float = field(default_factory=time.monotonic)


@dataclass
class StubFiles:
    files: dict[str, StubFile] = field(default_factory=dict)
    downloads: list[Download] = field(default_factory=list)
    """Every request to the file route, in order (served or not)."""
    download_faults: deque[DownloadFault] = field(default_factory=deque)
    """How the next downloads go wrong, one per download: a status (404, 500...), ``cut``, ``hang`` or
    ``trickle``."""
    down: int | None = None
    """While set, every download is answered with this status (a file server that stays down)."""
    trickle_ends: asyncio.Event = field(default_factory=asyncio.Event)
    """Set: a ``trickle`` download sends the rest of its file."""
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def add_file(
        self,
        file_id: str,
        data: bytes,
        *,
        folder: str = "documents",
        extension: str = "bin",
        file_unique_id: str | None = None,
        size: int | None = None,
    ) -> StubFile:
        """Register ``data`` under ``file_id`` at ``<folder>/file_<n>.<extension>`` (Telegram's layout)."""
        stored = StubFile(
            file_id=file_id,
            file_unique_id=file_unique_id or f"U{file_id}"[:16],
            data=data,
            file_path=f"{folder}/file_{next(self._counter)}.{extension}",
            size=len(data) if size is None else size,
        )
        self.files[file_id] = stored
        return stored

    def by_path(self, file_path: str) -> StubFile | None:
        return next((f for f in self.files.values() if f.file_path == file_path), None)

    def downloaded(self, file_id: str) -> list[Download]:
        """The served downloads of one registered file."""
        path = self.files[file_id].file_path
        return [d for d in self.downloads if d.file_path == path and d.status == 200]

    def get_file(self, params: dict[str, Any]) -> dict[str, Any] | web.Response:
        """``getFile``'s result, or its error answer (a 400 with the Bot API's description)."""
        stored = self.files.get(str(params.get("file_id") or ""))
        if stored is None:
            return _bad_request("Bad Request: invalid file_id")
        if stored.size > DOWNLOAD_LIMIT:
            return _bad_request("Bad Request: file is too big")
        return stored.as_file()

    async def download(self, request: web.Request) -> web.StreamResponse:
        path, token = request.match_info["path"], request.match_info["token"]
        stored = self.by_path(path)
        fault = self.download_faults.popleft() if self.download_faults else self.down
        status = 404 if stored is None else fault if isinstance(fault, int) else 200
        self.downloads.append(Download(path, token, status))
        if stored is None or isinstance(fault, int):
            body = {"ok": False, "error_code": status, "description": "Not Found" if status == 404 else "stub error"}
            return web.json_response(body, status=status)
        if fault == "hang":
            await self._stopping.wait()
        response = web.StreamResponse(
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(stored.data))}
        )
        await response.prepare(request)
        if fault == "trickle":
            await self._trickle(response, stored.data)
            return response
        if fault == "cut":
            await response.write(stored.data[: len(stored.data) // 2])
            if request.transport is not None:
                request.transport.close()
            return response
        await response.write(stored.data)
        await response.write_eof()
        return response

    async def _trickle(self, response: web.StreamResponse, data: bytes) -> None:
        with contextlib.suppress(ConnectionError):  # the client gave up (or the worker was stopped)
            await self._trickle_into(response, data)

    async def _trickle_into(self, response: web.StreamResponse, data: bytes) -> None:
        sent = 0
        while not (self.trickle_ends.is_set() or self._stopping.is_set()) and sent < len(data) - 1:
            await response.write(data[sent : sent + 1])
            sent += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.trickle_ends.wait(), 0.5)
        await response.write(data[sent:])
        await response.write_eof()

    def stop(self) -> None:
        self._stopping.set()


def _bad_request(description: str) -> web.Response:
    return web.json_response({"ok": False, "error_code": 400, "description": description}, status=400)


def photo_sizes(width: int, height: int) -> list[tuple[int, int]]:
    """The sizes Telegram keeps of a ``width`` x ``height`` photo, smallest first: each of the
    standard longest sides the photo is larger than, then the photo (at most 2560 on its longest side)."""
    longest = max(width, height)
    sizes = [
        (max(1, width * side // longest), max(1, height * side // longest)) for side in PHOTO_SIDES if side < longest
    ]
    return sizes if longest > PHOTO_SIDES[-1] else [*sizes, (width, height)]


class MediaUpdates:
    """Update builders for the media a customer sends (a mixin of ``StubTelegram``); each registers
    its files so getFile and the download serve them."""

    files: StubFiles
    _media_ids: itertools.count[int]

    def message_update(self, chat_id: int, text: str | None = None, **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError

    def add_file(self, file_id: str, data: bytes, **kwargs: Any) -> StubFile:
        return self.files.add_file(file_id, data, **kwargs)

    def _media(self, chat_id: int, key: str, media: Any, caption: str | None, **kwargs: Any) -> dict[str, Any]:
        extra: dict[str, Any] = {key: media, **kwargs.pop("extra", {})}
        if caption is not None:
            extra["caption"] = caption
        return self.message_update(chat_id, None, extra=extra, **kwargs)

    def photo_message(
        self,
        chat_id: int,
        data: bytes,
        *,
        width: int = 1280,
        height: int = 960,
        caption: str | None = None,
        thumbnails: bytes | None = None,
        size: int | None = None,
        media_group_id: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """A photo as Telegram sends it: a PhotoSize per size, each its own file; the largest serves
        ``data``, the smaller ones ``thumbnails`` (``data`` unless given: the stub does not resize)."""
        n = next(self._media_ids)
        sizes = photo_sizes(width, height)
        photo = []
        for index, (w, h) in enumerate(sizes):
            largest = index == len(sizes) - 1
            blob = data if largest or thumbnails is None else thumbnails
            stored = self.files.add_file(
                f"AgACAgI-photo{n}-{index}",
                blob,
                folder="photos",
                extension="jpg",
                file_unique_id=f"AQAD{n}-{index}",
                size=size if largest else None,
            )
            photo.append(
                {
                    "file_id": stored.file_id,
                    "file_unique_id": stored.file_unique_id,
                    "file_size": stored.size,
                    "width": w,
                    "height": h,
                }
            )
        extra = {"media_group_id": media_group_id} if media_group_id else {}
        return self._media(chat_id, "photo", photo, caption, extra=extra, **kwargs)

    def album(
        self, chat_id: int, photos: list[bytes], caption: str | None = None, **kwargs: Any
    ) -> list[dict[str, Any]]:
        """Several photos sent together: one message each, one ``media_group_id``, the caption on the first."""
        group = f"1337{next(self._media_ids):08d}"
        return [
            self.photo_message(chat_id, data, caption=caption if i == 0 else None, media_group_id=group, **kwargs)
            for i, data in enumerate(photos)
        ]

    def voice_message(
        self,
        chat_id: int,
        data: bytes,
        *,
        duration: int = 3,
        size: int | None = None,
        mime_type: str = "audio/ogg",
        caption: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """A voice note (OGG/Opus as Telegram records it, ``voice/file_<n>.oga``)."""
        n = next(self._media_ids)
        stored = self.files.add_file(
            f"AwACAgI-voice{n}", data, folder="voice", extension="oga", file_unique_id=f"AgAD-v{n}", size=size
        )
        voice = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "duration": duration,
            "mime_type": mime_type,
            "file_size": stored.size,
        }
        return self._media(chat_id, "voice", voice, caption, **kwargs)

    def audio_message(
        self,
        chat_id: int,
        data: bytes,
        *,
        duration: int = 30,
        file_name: str = "track.mp3",
        mime_type: str = "audio/mpeg",
        size: int | None = None,
        caption: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        n = next(self._media_ids)
        extension = file_name.rsplit(".", 1)[-1] if "." in file_name else "bin"
        stored = self.files.add_file(
            f"CQACAgI-audio{n}", data, folder="music", extension=extension, file_unique_id=f"AgAD-a{n}", size=size
        )
        audio = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "duration": duration,
            "file_name": file_name,
            "mime_type": mime_type,
            "file_size": stored.size,
        }
        return self._media(chat_id, "audio", audio, caption, **kwargs)

    def video_note_message(
        self, chat_id: int, data: bytes, *, duration: int = 5, length: int = 240, size: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """A round video message (MPEG-4, no mime_type field, as the Bot API sends it)."""
        n = next(self._media_ids)
        stored = self.files.add_file(
            f"DQACAgI-vnote{n}", data, folder="video_notes", extension="mp4", file_unique_id=f"AgAD-n{n}", size=size
        )
        note = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "length": length,
            "duration": duration,
            "file_size": stored.size,
        }
        return self._media(chat_id, "video_note", note, None, **kwargs)

    def document_message(
        self,
        chat_id: int,
        data: bytes,
        *,
        file_name: str = "invoice.pdf",
        mime_type: str = "application/pdf",
        size: int | None = None,
        caption: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """A file sent as a document (a PDF, a text, or an image sent uncompressed as a file)."""
        n = next(self._media_ids)
        extension = file_name.rsplit(".", 1)[-1] if "." in file_name else "bin"
        stored = self.files.add_file(
            f"BQACAgI-doc{n}", data, folder="documents", extension=extension, file_unique_id=f"AgAD-d{n}", size=size
        )
        document = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_name": file_name,
            "mime_type": mime_type,
            "file_size": stored.size,
        }
        return self._media(chat_id, "document", document, caption, **kwargs)
