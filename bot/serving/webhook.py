"""Webhook mode: an aiohttp server that only accepts requests carrying WEBHOOK_SECRET."""

from __future__ import annotations

from aiogram import Bot, Dispatcher
from aiogram.webhook.aiohttp_server import SimpleRequestHandler, setup_application
from aiohttp import web

from bot.settings import BotSettings


def build_webhook_app(*, bot: Bot, dispatcher: Dispatcher, settings: BotSettings) -> web.Application:
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else ""
    if not secret:
        raise ValueError("BOT_MODE=webhook needs WEBHOOK_SECRET")
    app = web.Application()
    # aiogram answers 401 to a request without the right X-Telegram-Bot-Api-Secret-Token and
    # never feeds it to the dispatcher.
    SimpleRequestHandler(dispatcher=dispatcher, bot=bot, secret_token=secret).register(app, path=settings.webhook_path)
    setup_application(app, dispatcher, bot=bot)
    return app
