"""Telegram albums as one turn, assembled here and nowhere else. An album is several updates (one
photo each, one media group id); each is recorded as it arrives (by the intake in queued mode, before
the per-chat queue; by the dispatcher's ``feed_update`` in-process, before the per-chat lock), so the
first photo's turn can wait until the album stops growing and take every photo (``take_album``); the
others find theirs taken."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Literal

from aiogram import Bot, Dispatcher
from aiogram.types import Message, Update

from services.media.reader import Incoming
from services.ports.media import AlbumItem, Albums

log = logging.getLogger(__name__)

QUIET_SECONDS = 0.8
"""An album is complete when no photo was added for this long (Telegram sends them within ms)."""
MAX_WAIT_SECONDS = 4.0
POLL_SECONDS = 0.1


def album_of(update: dict[str, Any]) -> tuple[int, str, AlbumItem] | None:
    """(chat id, media group id, the photo) of an update that is an album's photo or image file."""
    message = update.get("message")
    if not isinstance(message, dict) or not message.get("media_group_id"):
        return None
    chat = message.get("chat")
    if not isinstance(chat, dict) or not isinstance(chat.get("id"), int):
        return None
    caption = str(message.get("caption") or "")
    photos = message.get("photo")
    document = message.get("document")
    kind: Literal["photo", "image_file"] = "photo"
    if isinstance(photos, list) and photos and isinstance(photos[-1], dict):
        best = photos[-1]
        width, height = int(best.get("width") or 0), int(best.get("height") or 0)
    elif isinstance(document, dict) and str(document.get("mime_type") or "").lower().startswith("image/"):
        best, width, height, kind = document, 0, 0, "image_file"
    else:
        return None
    if not isinstance(best.get("file_id"), str) or not isinstance(best.get("file_unique_id"), str):
        return None
    size = best.get("file_size")
    item = AlbumItem(
        message_id=int(message.get("message_id") or 0),
        file_id=best["file_id"],
        file_unique_id=best["file_unique_id"],
        caption=caption,
        file_size=size if isinstance(size, int) else None,
        width=width,
        height=height,
        kind=kind,
    )
    return chat["id"], str(message["media_group_id"]), item


async def record_album_photo(albums: Albums, update: dict[str, Any]) -> None:
    """Record the update's album photo, if it is one (idempotent)."""
    found = album_of(update)
    if found is not None:
        await albums.add(*found)


async def wait_until_complete(
    albums: Albums, chat_id: int, group: str, *, quiet: float = QUIET_SECONDS, max_wait: float = MAX_WAIT_SECONDS
) -> None:
    """Return once the album has not grown for ``quiet`` seconds (at most ``max_wait`` in all)."""
    started = last_change = time.monotonic()
    count = await albums.count(chat_id, group)
    while (now := time.monotonic()) - last_change < quiet and now - started < max_wait:
        await asyncio.sleep(POLL_SECONDS)
        latest = await albums.count(chat_id, group)
        if latest != count:
            count, last_change = latest, time.monotonic()


async def take_album(
    albums: Albums, message: Message, first: Incoming, caption: str, turn_id: str
) -> tuple[list[Incoming], str] | None:
    """The album of ``message`` (its file ``first``, its ``caption``) once it stopped growing: every
    file and the captions joined, for the turn that takes it (``turn_id``); None for the others,
    answered with the album's first photo."""
    chat_id, group = message.chat.id, str(message.media_group_id)
    kind: Literal["photo", "image_file"] = "image_file" if first.kind == "image_file" else "photo"
    item = AlbumItem(message.message_id, first.file_id, first.file_unique_id, caption, first.file_size, kind=kind)
    await albums.add(chat_id, group, item)
    await wait_until_complete(albums, chat_id, group)
    taken = await albums.take(chat_id, group, turn_id)
    if not taken:
        return None
    items = [Incoming(t.kind, t.file_id, t.file_unique_id, t.file_size) for t in taken]
    return items, "\n".join(text for text in dict.fromkeys(t.caption for t in taken) if text)


class AlbumDispatcher(Dispatcher):
    """A Dispatcher that records an album's photo before the update meets the per-chat lock (the
    handler of the album's first photo holds it while it waits for the rest). Recording awaits the
    store, so every message of a chat passes a per-chat gate in arrival order first: a text sent
    right after an album does not overtake the album's photos to the per-chat lock."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._gates: dict[int, tuple[asyncio.Lock, list[int]]] = {}

    async def feed_update(self, bot: Bot, update: Update, **kwargs: Any) -> Any:
        albums: Albums | None = self.get("albums")
        message = update.message
        if albums is None or message is None:
            return await super().feed_update(bot, update, **kwargs)
        lock, users = self._gates.setdefault(message.chat.id, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:  # no wait (and no yield) when no album photo of the chat is being recorded
                if message.media_group_id:
                    await self._record(albums, update)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._gates[message.chat.id]
        return await super().feed_update(bot, update, **kwargs)

    @staticmethod
    async def _record(albums: Albums, update: Update) -> None:
        try:
            await record_album_photo(albums, update.model_dump(mode="json", exclude_none=True))
        except Exception as exc:
            log.warning("album photo of update %s not recorded early: %s", update.update_id, exc)
