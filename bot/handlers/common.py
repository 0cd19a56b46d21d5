"""Small helpers shared by the routers."""

from __future__ import annotations

from aiogram.types import User

from bot.settings import BotSettings
from bot.texts import pick_language


def language_of(user: User | None, settings: BotSettings) -> str:
    return pick_language(user.language_code if user else None, settings.default_language)
