"""Photos, image files, albums, voice notes, audio, video notes and documents: handed to the turn as
a media source (services.media.source), read there, then answered like text. A kind turned off gets
the reply of a message the bot cannot read (``text_only``)."""

from __future__ import annotations

from aiogram import Bot, Router
from aiogram.types import Message, Update

from bot.settings import BotSettings
from bot.telegram.action_render import customer_of
from bot.telegram.albums import take_album
from bot.telegram.desk import HandoffDesk
from bot.telegram.download_notice import DownloadNotice, tell_once
from bot.telegram.files import downloader, incoming_of
from bot.telegram.handlers.chat import serve_turn
from bot.telegram.link_hosts import LinkPolicy
from bot.telegram.middlewares.ratelimit import RateLimitMiddleware
from bot.telegram.texts import Texts
from services.core.fence import Fence
from services.engine.chat import ChatService
from services.media.reader import MediaReader
from services.media.source import MediaSource
from services.ports.backend import Backend
from services.ports.media import Albums
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
    backend: Backend,
    fence: Fence | None = None,
    customer_text: str | None = None,
    links: LinkPolicy | None = None,
    download_notice: DownloadNotice | None = None,
    transient_failures: int = 0,
) -> None:
    """``customer_text``: the caption as AccessMiddleware read it (without the bot's mention). A file
    slow to come is told of once (``download_notice``), on the update's first attempt only. The turn
    gets the files as a ``MediaSource``: the engine reads them only if the turn is to be answered."""
    chat_id = message.chat.id
    items = incoming_of(message)
    family = items[0].family
    if media_reader is None or not media_reader.enabled(family):  # None: a dispatcher built without media
        await message.answer(say("text_only"))
        return
    caption = customer_text or ""
    if message.media_group_id and family == "image":  # checked once all are taken: only the taker refuses
        album = await take_album(albums, message, items[0], caption, item_id_of(event_update.update_id))
        if album is None:
            return  # answered with the album's first photo
        items, caption = album
    notice = download_notice or DownloadNotice()
    slow = tell_once(notice, bot, chat_id, say("media_download_retrying"), told_before=bool(transient_failures))
    source = MediaSource(media_reader, items, downloader(bot, family, on_slow=slow))
    source.check()  # before any download
    result = await serve_turn(
        message, bot, chat, settings, say, event_update, desk, caption, fence=fence, media=source, links=links,
        customer=await customer_of(message, backend),
    )  # fmt: skip
    document = source.media.document if source.media is not None else None
    if document is not None and document.truncated and not result.duplicate:
        if fence is not None:
            fence.ensure_valid()
        await bot.send_message(chat_id, say("media_document_cut", tokens=document.tokens))


def make_router() -> Router:
    router = Router(name="media")
    router.message.middleware(RateLimitMiddleware())
    router.message.register(on_media, has_media)
    return router
