"""The model's Markdown → Telegram text + entities, split into messages of at most 4096 characters."""

from __future__ import annotations

import logging
from collections.abc import Callable

import telegramify_markdown
from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest
from aiogram.types import MessageEntity

from bot.telegram import linear_markdown
from bot.telegram.link_hosts import LinkPolicy
from bot.telegram.links import safe_entities

log = logging.getLogger(__name__)
linear_markdown.install()

TELEGRAM_TEXT_LIMIT = 4096
_NO_HOSTS = LinkPolicy()
RENDER_MAX_CHARS = 2 * TELEGRAM_TEXT_LIMIT
"""A longer reply, or one nesting lists deeper than linear_markdown.MAX_NESTING on a line, is sent
as plain text: the Markdown parser (pyromark) and the converter's walk are super-linear on some
shapes (nested lists or quotes, long runs of "$"), 20 kB of them takes seconds holding the GIL.
A reply of MAX_OUTPUT_TOKENS=1024 is about 5 kB of prose."""


def render_chunks(
    markdown: str, limit: int = TELEGRAM_TEXT_LIMIT, *, links: LinkPolicy | None = None
) -> list[tuple[str, list[MessageEntity]]]:
    """Convert Markdown to (text, entities) chunks. Splits fall on line/paragraph boundaries where
    possible; an entity crossing a split is clipped into both chunks, so formatting never breaks.
    Links are made honest first (``bot.telegram.links``): only hosts ``links`` allows stay links
    (without a policy, none), every other address is shown."""
    if len(markdown) > RENDER_MAX_CHARS or linear_markdown.too_nested(markdown):
        plain, _ = safe_entities(markdown, [], links or _NO_HOSTS)  # addresses in plain text too
        return [(chunk, []) for chunk, _ in telegramify_markdown.split_entities(plain, [], limit)]
    plain, entities = telegramify_markdown.convert(markdown)
    plain, entities = safe_entities(plain, entities, links or _NO_HOSTS)
    chunks = telegramify_markdown.split_entities(plain, entities, limit)
    return [
        (chunk, [MessageEntity.model_validate(e.to_dict()) for e in chunk_entities]) for chunk, chunk_entities in chunks
    ]


async def send_reply(
    bot: Bot,
    chat_id: int,
    markdown: str,
    *,
    reply_to: int | None = None,
    before_each: Callable[[], None] | None = None,
    links: LinkPolicy | None = None,
) -> int:
    """Send a model reply as one or more formatted messages; returns how many were sent.

    ``before_each`` runs before every message (a queue worker checks it still holds the chat's lease).
    If Telegram rejects the entities of a chunk, that chunk is sent again as plain text (the links'
    addresses already shown in it)."""
    chunks = render_chunks(markdown, links=links) or [(markdown[:TELEGRAM_TEXT_LIMIT], [])]
    for index, (chunk, entities) in enumerate(chunks):
        if before_each is not None:
            before_each()
        reply = reply_to if index == 0 else None
        try:
            await bot.send_message(
                chat_id, chunk, entities=entities or None, parse_mode=None, reply_to_message_id=reply
            )
        except TelegramBadRequest as exc:
            if not entities:
                raise
            log.warning("Telegram rejected the formatting (%s); sending plain text", exc.message)
            await bot.send_message(chat_id, chunk, parse_mode=None, reply_to_message_id=reply)
    return len(chunks)
