"""Puts the customer's texts (``say``, a ``bot.telegram.texts.Texts``) into every message handler's data."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware
from aiogram.types import Message, TelegramObject

from bot.settings import BotSettings
from bot.telegram.texts import Texts


class LanguageMiddleware(BaseMiddleware):
    def __init__(self, settings: BotSettings) -> None:
        self._settings = settings

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        user = event.from_user if isinstance(event, Message) else None
        data["say"] = Texts.for_user(user, self._settings)
        return await handler(event, data)
