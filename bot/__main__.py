"""Entry point: ``python -m bot`` runs the bot (BOT_MODE=polling|webhook; with REDIS_URL set, as a
queue worker that can run in many processes);
``python -m bot set-webhook`` registers WEBHOOK_URL with Telegram; ``python -m bot console`` chats in
the terminal; ``python -m bot dead-letters …`` and ``python -m bot quarantine …`` are for operators."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from pydantic import ValidationError

from bot.cli.preflight import check_api_key, missing_message, missing_settings
from bot.logs import setup_logging
from bot.serving.fastpath import install_event_loop
from bot.settings import Settings
from services.errors import ConfigurationError, SupportBotError

# aiogram, aiohttp and openai take seconds to import: the modes are loaded only once the settings
# are checked, so the first log line (and any "setting missing" message) comes at once.

log = logging.getLogger("bot")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bot", description="Customer-support Telegram bot")
    parser.add_argument(
        "command",
        nargs="?",
        default="run",
        choices=["run", "set-webhook", "console", "dead-letters", "quarantine", "knowledge"],
    )
    parser.add_argument(
        "action",
        nargs="?",
        default="list",
        help="dead-letters/quarantine: list, show, replay, drop; knowledge: list, search, gaps",
    )
    parser.add_argument(
        "target", nargs="?", help="dead-letters: the ID; quarantine: the chat id; knowledge search: the query"
    )
    parser.add_argument("--chat-id", type=int, default=1, help="console: which session to use")
    parser.add_argument(
        "--certificate", type=Path, help="set-webhook: PEM certificate to upload (self-signed TLS in front)"
    )
    from bot.cli.knowledge import add_explain

    add_explain(parser)
    args = parser.parse_args(argv)
    try:
        settings = Settings()
    except ValidationError as exc:
        raise SystemExit(f"invalid settings (see .env.example):\n{exc}") from None
    setup_logging(settings.bot.log_level, settings.bot.log_format)
    log.info("support-bot starting: %s", describe(args.command, settings))
    if args.command in ("run", "console"):
        log.info("event loop: %s", install_event_loop(settings.runtime))  # before any loop starts
    missing = missing_settings(args.command, settings)
    if missing:
        log.error("%s", missing_message(args.command, missing))
        raise SystemExit(2)
    try:
        if args.command in ("run", "console"):
            asyncio.run(check_api_key(settings.llm))
        _run(args, settings)
    except (ConfigurationError, SupportBotError) as exc:
        log.error("cannot start: %s", exc)
        raise SystemExit(2) from None
    except ValueError as exc:  # e.g. BOT_TOKEN missing
        log.error("cannot start: %s", exc)
        raise SystemExit(2) from None


def describe(command: str, settings: Settings) -> str:
    if command != "run":
        return command
    store = "Redis queue worker" if settings.redis.redis_url is not None else "in-process store"
    return f"{settings.bot.bot_mode} mode, {store}"


def _run(args: argparse.Namespace, settings: Settings) -> None:
    if args.command == "console":
        from bot.cli.console import main as console_main

        asyncio.run(console_main(args.chat_id))
    elif args.command == "set-webhook":
        from bot.cli.webhook_setup import set_webhook

        asyncio.run(set_webhook(settings, args.certificate))
    elif args.command == "knowledge":
        raise SystemExit(asyncio.run(_knowledge(args, settings)))
    elif args.command in ("dead-letters", "quarantine"):
        raise SystemExit(asyncio.run(_admin(args, settings)))
    elif settings.redis.redis_url is not None:
        from bot.modes.queued import run_queued

        asyncio.run(run_queued(settings))
    elif settings.bot.bot_mode == "webhook":
        from bot.modes.inprocess import run_webhook

        run_webhook(settings)
    else:
        from bot.modes.inprocess import run_polling

        asyncio.run(run_polling(settings))


async def _knowledge(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli import knowledge
    from bot.factory import build_backend, build_knowledge, open_redis_backend
    from services.engine.tokens import TokenCounter

    if args.action not in ("list", "search", "gaps"):
        log.error("knowledge: unknown action %r (one of list, search, gaps)", args.action)
        return 2
    if args.action == "gaps":
        if settings.redis.redis_url is None:
            log.error("knowledge gaps needs REDIS_URL: the in-process mode keeps its records in the bot's process")
            return 2
        backend = await open_redis_backend(settings)
        try:
            return await knowledge.gaps(backend.gaps)
        finally:
            await backend.close()
    if args.action == "search" and not args.target:
        log.error('knowledge search needs a query: python -m bot knowledge search "how do I return it?"')
        return 2
    shared = build_backend(settings)
    try:
        library = build_knowledge(settings, shared)
        if library is None:
            log.error("knowledge: KNOWLEDGE_DIR is not set")
            return 2
        if library.needs_vectors:  # the vectors the bot's workers cached (embedding what is missing)
            await library.refresh()
        if args.action == "search" and args.explain:
            return await knowledge.explain(
                library,
                args.target,
                limit=settings.knowledge.knowledge_top_k,
                budget=settings.knowledge.knowledge_token_budget,
                counter=TokenCounter.for_encoding(settings.memory.tokenizer_encoding),
            )
        if args.action == "search":
            return await knowledge.search(library, args.target, limit=settings.knowledge.knowledge_top_k)
        return knowledge.show(library)
    finally:
        await shared.close()


async def _admin(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli import admin
    from bot.factory import open_redis_backend

    if settings.redis.redis_url is None:
        log.error("%s needs REDIS_URL (the in-process mode keeps no dead letters)", args.command)
        return 2
    actions = {"dead-letters": ("list", "show", "replay", "drop"), "quarantine": ("list", "show", "drop")}
    if args.action not in actions[args.command]:
        log.error("%s: unknown action %r (one of %s)", args.command, args.action, ", ".join(actions[args.command]))
        return 2
    backend = await open_redis_backend(settings)
    try:
        if args.command == "dead-letters":
            return await admin.dead_letters(backend, args.action, args.target)
        chat_id = int(args.target) if args.target else None
        return await admin.quarantine(backend, args.action, chat_id)
    finally:
        await backend.close()


if __name__ == "__main__":
    main()
