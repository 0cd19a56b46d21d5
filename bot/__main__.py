"""Entry point: ``python -m bot`` (installed: ``support-bot``) runs the bot (BOT_MODE=polling|webhook;
with REDIS_URL set, as a queue worker that can run in many processes); the other commands
(``python -m bot help`` lists them) are in ``bot/cli/``, their arguments in ``bot/cli/commands.py``."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from bot.cli.commands import parse_command_line
from bot.cli.preflight import check_actions_file, check_api_key, missing_message, missing_settings
from bot.cli.settings_errors import load_settings_or_exit
from bot.logs import setup_logging
from bot.redaction import redact_secrets
from bot.serving.fastpath import install_event_loop
from bot.settings import Settings
from services.core.errors import ConfigurationError, SupportBotError

# aiogram, aiohttp and openai take seconds to import: the modes are loaded only once the settings
# are checked, so the first log line (and any "setting missing" message) comes at once.

log = logging.getLogger("bot")


def main(argv: list[str] | None = None) -> None:
    args = parse_command_line(argv)  # help and argument errors here, before any heavy import
    settings = load_settings_or_exit()  # one line per mistake, no value, exit 2
    setup_logging(settings.bot.log_level, settings.bot.log_format)
    redact_secrets(settings)
    log.info("support-bot starting: %s", describe(args.command, settings))
    if args.command in ("run", "console"):
        log.info("event loop: %s", install_event_loop(settings.runtime))  # before any loop starts
    missing = missing_settings(args.command, settings)
    if missing:
        log.error("%s", missing_message(args.command, missing))
        raise SystemExit(2)
    try:
        if args.command in ("run", "console"):
            check_actions_file(settings)
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
    elif args.command in OPERATOR_COMMANDS:
        raise SystemExit(asyncio.run(OPERATOR_COMMANDS[args.command](args, settings)))
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
    shared_records = args.action in ("gaps", "faq")
    if shared_records and settings.redis.redis_url is None:
        log.error("knowledge %s needs REDIS_URL: the in-process mode keeps its records in its process", args.action)
        return 2
    if args.action == "faq" and args.target != "export":
        log.error("knowledge faq: the action is export (python -m bot knowledge faq export [--output FILE])")
        return 2
    if not shared_records and not settings.knowledge.knowledge_dir:
        log.error("knowledge: KNOWLEDGE_DIR is not set (the folder of the documents the bot answers from)")
        return 2
    from bot.backends import build_backend, open_redis_backend
    from bot.cli import knowledge  # seconds of imports: only once the settings allow the command
    from bot.knowledge_setup import build_knowledge
    from services.core.tokens import TokenCounter

    if shared_records:
        backend = await open_redis_backend(settings)
        try:
            if args.action == "faq":
                return await knowledge.export_faq(backend.faq, output=args.output)
            from bot.knowledge_setup import build_embedder

            return await knowledge.gaps(backend.gaps, embedder=build_embedder(settings, backend))
        finally:
            await backend.close()
    shared = build_backend(settings, offline=True)
    try:
        library = build_knowledge(settings, shared)
        assert library is not None  # KNOWLEDGE_DIR checked above
        # the learned FAQ entries, and the vectors the bot's workers cached (embedding what is missing)
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
    if settings.redis.redis_url is None:
        log.error("%s needs REDIS_URL (the in-process mode keeps no dead letters)", args.command)
        return 2
    from bot.backends import open_redis_backend
    from bot.cli import admin

    backend = await open_redis_backend(settings)
    try:
        if args.command == "dead-letters":
            return await admin.dead_letters(backend, args.action, args.target)
        return await admin.quarantine(backend, args.action, args.target)
    finally:
        await backend.close()


async def _chat(args: argparse.Namespace, settings: Settings) -> int:
    if settings.redis.redis_url is None:
        log.error(
            "chat show reads the sessions in Redis, and REDIS_URL is unset: the sessions live only in the "
            "running bot's process (its log's `turn chat=… passages=…` lines show what each turn used)"
        )
        return 2
    from bot.backends import open_redis_backend
    from bot.cli import chats
    from bot.knowledge_setup import build_knowledge

    backend = await open_redis_backend(settings)
    try:
        library = build_knowledge(settings, backend) if settings.knowledge.knowledge_dir else None
        return await chats.show(backend.store, args.target, library=library)
    finally:
        await backend.close()


async def _actions(args: argparse.Namespace, settings: Settings) -> int:
    path = (args.target if args.action == "check" else None) or settings.actions.actions_file
    if not path:
        log.error("actions: ACTIONS_FILE is not set (the YAML file of the tools; docs/actions.md), and no PATH given")
        return 2
    from bot.cli import actions  # YAML, RE2 and JSON Schema: only for this command
    from services.actions.catalog import audit_key
    from services.core.actions import Customer

    catalog = actions.open_catalog(
        path,
        operator_chat_configured=settings.bot.handoff_enabled,
        timeout=settings.actions.actions_timeout_seconds,
        max_bytes=settings.actions.actions_max_response_bytes,
        audit_key=audit_key(settings.bot.bot_token.get_secret_value()),  # the bot's own audit digests
    )
    if catalog is None:
        return 2
    if args.action == "check":
        return actions.check(catalog)
    if args.action == "list":
        return actions.show(catalog)
    customer = Customer(telegram_id=args.customer_id, phone=args.phone)
    return await actions.test(catalog, args.target, args.param, customer, send=args.yes, key=args.idempotency_key)


async def _report(args: argparse.Namespace, settings: Settings) -> int:
    if settings.redis.redis_url is None:
        log.error("report reads the conversation records in Redis, and REDIS_URL is unset (in-process mode keeps "
                  "them in the bot's process only)")  # fmt: skip
        return 2
    from bot.backends import open_redis_backend
    from bot.cli.report import report

    backend = await open_redis_backend(settings)
    try:
        return await report(backend.conversations, backend.gaps, days=args.days, plot=args.plot)
    finally:
        await backend.close()


OPERATOR_COMMANDS: dict[str, Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]] = {
    "knowledge": _knowledge,
    "dead-letters": _admin,
    "quarantine": _admin,
    "chat": _chat,
    "actions": _actions,
    "report": _report,
}


if __name__ == "__main__":
    main()
