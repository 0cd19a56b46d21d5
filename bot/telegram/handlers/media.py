"""Photos, image files, albums, voice notes, audio, video notes and documents: read into the turn
(services.media.reader), then answered like text. A kind turned off keeps the text-only reply."""

from __future__ import annotations

from typing import Literal

from aiogram import Bot, Router
from aiogram.types import Message, Update

from bot.settings import BotSettings
from bot.telegram.albums import wait_until_complete
from bot.telegram.desk import HandoffDesk
from bot.telegram.download_notice import DownloadNotice
from bot.telegram.files import downloader, incoming_of
from bot.telegram.handlers.chat import serve_turn
from bot.telegram.link_hosts import LinkPolicy
from bot.telegram.middlewares.ratelimit import RateLimitMiddleware
from bot.telegram.texts import Texts
from services.engine.chat import ChatService
from services.fence import Fence
from services.media.prompt_parts import TurnMedia
from services.media.reader import Incoming, MediaReader
from services.ports.media import AlbumItem, Albums
from services.ports.queue import item_id_of


async def has_media(message: Message) -> bool:
    return bool(incoming_of(message))


async def on_media(
    message: Message,
    bot: Bot,
    chat: ChatService,
    settings: BotSettings,
    say: Texts,
    event_update: Update,
    desk: HandoffDesk,
    media_reader: MediaReader | None,
    albums: Albums,
    fence: Fence | None = None,
    customer_text: str | None = None,
    links: LinkPolicy | None = None,
    download_notice: DownloadNotice | None = None,
    transient_failures: int = 0,
) -> None:
    """``customer_text``: the caption as AccessMiddleware read it (without the bot's mention). A file
    slow to come is told of once (``download_notice``), on the update's first attempt only."""
    chat_id = message.chat.id
    items = incoming_of(message)
    family = items[0].family
    if media_reader is None or not media_reader.enabled(family):  # None: a dispatcher built without media
        await message.answer(say("text_only"))
        return
    caption = customer_text or ""
    if not (message.media_group_id and family == "image"):
        media_reader.check(items)  # before any download
    else:  # checked once all are taken: only the turn that takes the album refuses it
        group, turn_id = message.media_group_id, item_id_of(event_update.update_id)
        best = items[0]
        kind: Literal["photo", "image_file"] = "image_file" if best.kind == "image_file" else "photo"
        item = AlbumItem(message.message_id, best.file_id, best.file_unique_id, caption, best.file_size, kind=kind)
        await albums.add(chat_id, group, item)
        await wait_until_complete(albums, chat_id, group)
        taken = await albums.take(chat_id, group, turn_id)
        if not taken:
            return  # answered with the album's first photo
        items = [Incoming(t.kind, t.file_id, t.file_unique_id, t.file_size) for t in taken]
        caption = "\n".join(text for text in dict.fromkeys(t.caption for t in taken) if text)
        media_reader.check(items)
    read: list[TurnMedia] = []
    notice = download_notice or DownloadNotice()

    async def slow() -> None:
        if notice.sent or transient_failures:  # told already, on this attempt or an earlier one's failure
            return
        notice.sent = True
        await bot.send_message(chat_id, say("media_download_retrying"))

    async def media() -> TurnMedia:
        read.append(await media_reader.read(chat_id, items, download=downloader(bot, family, on_slow=slow)))
        return read[-1]

    result = await serve_turn(
        message, bot, chat, settings, say, event_update, desk, caption, fence=fence, media=media, links=links
    )
    document = read[-1].document if read else None
    if document is not None and document.truncated and not result.duplicate:
        if fence is not None:
            fence.ensure_valid()
        await bot.send_message(chat_id, say("media_document_cut", tokens=document.tokens))


def make_router() -> Router:
    router = Router(name="media")
    router.message.middleware(RateLimitMiddleware())
    router.message.register(on_media, has_media)
    return router
