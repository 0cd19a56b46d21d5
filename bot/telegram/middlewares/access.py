"""Who the bot talks to: optional user/chat allowlists, and in groups only messages addressed to it;
what it was told: the text without the mention that addressed it (``customer_text`` in the handler data)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware, Bot
from aiogram.types import Message, TelegramObject

from bot.settings import BotSettings
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)

GROUP_TYPES = {"group", "supergroup"}


async def addressed_to_bot(message: Message, bot: Bot) -> bool:
    """In a group: a command, a mention of the bot, or a reply to one of its messages."""
    if message.text and message.text.startswith("/"):
        return True
    me = await bot.me()
    reply = message.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == me.id:
        return True
    body = message.text if message.text is not None else message.caption  # a photo's or file's caption
    entities = message.entities if message.text is not None else message.caption_entities
    if me.username and body:
        for entity in entities or []:
            if entity.type == "mention" and entity.extract_from(body).lower() == f"@{me.username.lower()}":
                return True
    return False


def _strip_mention(text: str, username: str | None) -> str:
    if not username:
        return text
    return " ".join(word for word in text.split(" ") if word.lower() != f"@{username.lower()}").strip() or text


class AccessMiddleware(BaseMiddleware):
    """Outer middleware on messages (after the language middleware): refuses strangers once per message,
    skips group chatter, and puts a text message's (or a caption's) ``customer_text`` (in a group,
    without the bot's mention) into the handler data. The operator group (``OPERATOR_CHAT_ID``)
    passes: the handoff router takes all of it and none of it reaches the model."""

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if not isinstance(event, Message):
            return await handler(event, data)
        settings: BotSettings = data["settings"]
        bot: Bot = data["bot"]
        if settings.operator_chat_id is not None and event.chat.id == settings.operator_chat_id:
            return await handler(event, data)  # operators: no allowlist, no mention needed (handoff router)
        user_id = event.from_user.id if event.from_user else None
        if not settings.is_allowed(user_id, event.chat.id):
            log.info("refused chat=%s user=%s (not in the allowlist)", event.chat.id, user_id)
            say: Texts = data["say"]
            await event.answer(say("not_allowed"))
            return None
        if event.chat.type in GROUP_TYPES and settings.group_require_mention and not await addressed_to_bot(event, bot):
            return None
        body = event.text if event.text is not None else event.caption
        if body is not None:  # a caption is the customer's text of a photo, a voice note, a document
            in_group = event.chat.type in GROUP_TYPES
            data["customer_text"] = _strip_mention(body, (await bot.me()).username) if in_group else body
        return await handler(event, data)
