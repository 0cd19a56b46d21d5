"""Entry point: ``python -m bot`` runs the bot (BOT_MODE=polling|webhook; with REDIS_URL set, as a
queue worker that can run in many processes);
``python -m bot set-webhook`` registers WEBHOOK_URL with Telegram; ``python -m bot console`` chats in
the terminal; ``python -m bot dead-letters …`` and ``python -m bot quarantine …`` are for operators."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable

from aiohttp import web
from pydantic import ValidationError

from bot.app import (
    Backend,
    Settings,
    build_backend,
    build_bot,
    build_dispatcher,
    build_engine,
    open_backend,
    set_commands,
)
from bot.logs import setup_logging
from bot.ops import ReadyCheck, add_health_routes, start_ops_server
from bot.settings import WorkerSettings
from bot.startup import with_startup_retries
from bot.webhook import build_webhook_app
from services.errors import ConfigurationError, StoreError, SupportBotError

log = logging.getLogger("bot")


def readiness(backend: Backend, running: Callable[[], bool]) -> ReadyCheck:
    async def ready() -> dict[str, bool]:
        try:
            await backend.ping()
            store_ok = True
        except StoreError:
            store_ok = False
        return {"store": store_ok, "consuming": running()}

    return ready


async def run_polling(settings: Settings) -> None:
    backend = build_backend(settings)
    chat = build_engine(settings, backend.store)
    bot = build_bot(settings.bot)
    try:
        await with_startup_retries("connecting to Telegram", bot.get_me)
    except SupportBotError:
        await bot.session.close()
        raise
    dispatcher = build_dispatcher(chat, settings.bot, limiter=backend.limiter)
    await bot.delete_webhook(drop_pending_updates=False)  # getUpdates is refused while a webhook is set
    await set_commands(bot)
    polling = asyncio.Event()
    dispatcher.startup.register(polling.set)
    dispatcher.shutdown.register(polling.clear)
    ops = await start_ops_server(
        host=settings.bot.metrics_host, port=settings.bot.metrics_port, ready=readiness(backend, polling.is_set)
    )
    log.info("starting in polling mode")
    try:
        await dispatcher.start_polling(bot, allowed_updates=dispatcher.resolve_used_update_types())
    finally:
        if ops is not None:
            await ops.cleanup()


def run_webhook(settings: Settings) -> None:
    backend = build_backend(settings)
    chat = build_engine(settings, backend.store)
    bot = build_bot(settings.bot)
    dispatcher = build_dispatcher(chat, settings.bot, limiter=backend.limiter)

    async def on_startup() -> None:
        await with_startup_retries("connecting to Telegram", bot.get_me)
        await set_commands(bot)
        log.info(
            "webhook server on %s:%s%s", settings.bot.webhook_host, settings.bot.webhook_port, settings.bot.webhook_path
        )

    dispatcher.startup.register(on_startup)
    app = build_webhook_app(bot=bot, dispatcher=dispatcher, settings=settings.bot)
    ready = readiness(backend, lambda: True)
    add_health_routes(app, ready)
    ops: list[web.AppRunner] = []

    async def start_ops(_app: web.Application) -> None:
        runner = await start_ops_server(host=settings.bot.metrics_host, port=settings.bot.metrics_port, ready=ready)
        ops.extend([runner] if runner else [])

    async def stop_ops(_app: web.Application) -> None:
        for runner in ops:
            await runner.cleanup()

    app.on_startup.append(start_ops)
    app.on_cleanup.append(stop_ops)
    web.run_app(app, host=settings.bot.webhook_host, port=settings.bot.webhook_port, print=None)


async def set_webhook(settings: Settings) -> None:
    if not settings.bot.webhook_url:
        raise SystemExit("WEBHOOK_URL is not set")
    secret = settings.bot.webhook_secret.get_secret_value() if settings.bot.webhook_secret else None
    if not secret:
        raise SystemExit("WEBHOOK_SECRET is not set")
    bot = build_bot(settings.bot)
    try:
        await bot.set_webhook(settings.bot.webhook_url, secret_token=secret, allowed_updates=["message"])
        await set_commands(bot)
    finally:
        await bot.session.close()
    log.info("webhook registered at %s", settings.bot.webhook_url)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bot", description="Customer-support Telegram bot")
    parser.add_argument(
        "command", nargs="?", default="run", choices=["run", "set-webhook", "console", "dead-letters", "quarantine"]
    )
    parser.add_argument("action", nargs="?", default="list", help="dead-letters/quarantine: list, show, replay, drop")
    parser.add_argument("target", nargs="?", help="dead-letters: the ID; quarantine: the chat id")
    parser.add_argument("--chat-id", type=int, default=1, help="console: which session to use")
    args = parser.parse_args(argv)
    try:
        settings = Settings()
        workers = WorkerSettings()
    except ValidationError as exc:
        raise SystemExit(f"invalid settings (see .env.example):\n{exc}") from None
    setup_logging(settings.bot.log_level, settings.bot.log_format)
    try:
        _run(args, settings, workers)
    except (ConfigurationError, SupportBotError) as exc:
        log.error("cannot start: %s", exc)
        raise SystemExit(2) from None
    except ValueError as exc:  # e.g. BOT_TOKEN missing
        log.error("cannot start: %s", exc)
        raise SystemExit(2) from None


def _run(args: argparse.Namespace, settings: Settings, workers: WorkerSettings) -> None:
    if args.command == "console":
        from bot.console import main as console_main

        asyncio.run(console_main(args.chat_id))
    elif args.command == "set-webhook":
        asyncio.run(set_webhook(settings))
    elif args.command in ("dead-letters", "quarantine"):
        raise SystemExit(asyncio.run(_admin(args, settings)))
    elif settings.redis.redis_url is not None:
        from bot.runner import run_queued

        asyncio.run(run_queued(settings, workers))
    elif settings.bot.bot_mode == "webhook":
        run_webhook(settings)
    else:
        asyncio.run(run_polling(settings))


async def _admin(args: argparse.Namespace, settings: Settings) -> int:
    from bot import admin

    if settings.redis.redis_url is None:
        log.error("%s needs REDIS_URL (the in-process mode keeps no dead letters)", args.command)
        return 2
    actions = {"dead-letters": ("list", "show", "replay", "drop"), "quarantine": ("list", "show", "drop")}
    if args.action not in actions[args.command]:
        log.error("%s: unknown action %r (one of %s)", args.command, args.action, ", ".join(actions[args.command]))
        return 2
    backend = await open_backend(settings)
    try:
        if args.command == "dead-letters":
            return await admin.dead_letters(backend, args.action, args.target)
        chat_id = int(args.target) if args.target else None
        return await admin.quarantine(backend, args.action, chat_id)
    finally:
        await backend.close()


if __name__ == "__main__":
    main()
