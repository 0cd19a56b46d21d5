"""The command line of ``python -m bot`` (installed as ``support-bot``): one subcommand each, with its
own ``--help`` and a one-line description, and ``help [COMMAND]``. Parsing imports nothing but the
standard library, so a mistyped argument is answered (exit 2) before the seconds aiogram and openai
take to import."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

PROG = "support-bot" if Path(sys.argv[0]).name == "support-bot" else "python -m bot"
"""As invoked: the installed command's name, or the module's."""
DEFAULT = "run"

ACTIONS = {
    "dead-letters": ("list", "show", "replay", "drop"),
    "quarantine": ("list", "show", "drop"),
    "knowledge": ("list", "search", "gaps", "faq"),
    "chat": ("show",),
    "actions": ("check", "list", "test"),
}
NEEDS_TARGET = {
    ("dead-letters", "show"): "ID",
    ("dead-letters", "replay"): "ID",
    ("dead-letters", "drop"): "ID",
    ("quarantine", "show"): "CHAT_ID",
    ("quarantine", "drop"): "CHAT_ID",
    ("knowledge", "search"): "QUERY",
    ("knowledge", "faq"): "export",
    ("chat", "show"): "CHAT_ID",
    ("actions", "test"): "TOOL",
}
NUMERIC_TARGET = {"quarantine", "chat"}

DESCRIPTIONS = {
    "run": "run the bot (BOT_MODE=polling or webhook; with REDIS_URL, as a queue worker) [the default]",
    "set-webhook": "register WEBHOOK_URL and WEBHOOK_SECRET with Telegram (once per deployment)",
    "console": "chat with the engine in this terminal, without Telegram (needs only OPENAI_API_KEY)",
    "chat": "show a chat's summary, stored turns and the passages and media each turn used (REDIS_URL)",
    "knowledge": "the documents of KNOWLEDGE_DIR: list them, search them as a turn would, unanswered questions, "
    "the learned FAQ as Markdown (faq export)",
    "actions": "the tools of ACTIONS_FILE: check the file, list the tools, run one call as the bot would",
    "dead-letters": "updates given up after their retries: list, show, replay or drop them (REDIS_URL)",
    "quarantine": "sessions moved aside because they could not be read: list, show or drop them (REDIS_URL)",
    "report": "support quality: conversations, resolved by the bot, handed off, ratings, time to first answer "
    "(REDIS_URL)",
    "help": "show this help, or a command's: help COMMAND",
}

EPILOG = """examples:
  python -m bot                                 run the bot
  python -m bot console --chat-id 7             chat in the terminal as chat 7
  python -m bot knowledge search "refund?"      what a turn would retrieve
  python -m bot chat show 123456789             why did it answer that?
  python -m bot actions test order_status --param order_id=5521 --customer-id 7
  python -m bot dead-letters replay 42:u1001    queue a given-up update again
  python -m bot report --days 7 --plot q.png    the quality figures of a week, and a chart
Installed with pip, the same commands run as `support-bot …`."""


class CommandLine(argparse.ArgumentParser):
    """The top parser; ``commands`` holds each command's own parser (for ``help COMMAND``)."""

    commands: dict[str, argparse.ArgumentParser]


class Subcommands(Protocol):
    """What ``add_subparsers`` returns, as far as this module uses it."""

    def add_parser(self, name: str, *, help: str, description: str) -> CommandLine: ...


def _add(sub: Subcommands, name: str) -> CommandLine:
    return sub.add_parser(name, help=DESCRIPTIONS[name], description=DESCRIPTIONS[name])


def _with_actions(sub: Subcommands, name: str, target_help: str) -> CommandLine:
    actions = ACTIONS[name]
    parser = _add(sub, name)
    parser.add_argument("action", nargs="?", default=actions[0], choices=actions, help=f"default: {actions[0]}")
    parser.add_argument("target", nargs="?", metavar="TARGET", help=target_help)
    return parser


def days_count(value: str) -> int:
    """``--days``: a whole number from 1 to 3660."""
    try:
        days = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of days, got {value!r}") from None
    if not 1 <= days <= 3660:
        raise argparse.ArgumentTypeError(f"must be from 1 to 3660, got {days}")
    return days


def _wide(prog: str) -> argparse.HelpFormatter:
    """The examples as written; command names and their descriptions side by side."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=24, width=110)


def _actions_parser(sub: Subcommands) -> None:
    actions = _with_actions(sub, "actions", "check: the file (default: ACTIONS_FILE); test: the tool's name")
    actions.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="test: one argument of the call (repeat)"
    )
    actions.add_argument("--customer-id", type=int, help="test: the customer's Telegram user id (required)")
    actions.add_argument("--phone", help="test: the phone number the customer shared, for {customer.phone}")
    actions.add_argument("--yes", action="store_true", help="test: really send a write or approval tool's request")
    actions.add_argument("--idempotency-key", help="test: send with this key (the one printed by an earlier test)")


def _check_actions(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.action != "test":
        return
    if args.customer_id is None:
        parser.error("actions test needs --customer-id N (the customer the call is made for)")
    for param in args.param:
        if "=" not in param or not param.partition("=")[0]:
            parser.error(f"--param takes NAME=VALUE, got {param[:40]!r}")


def build_parser() -> CommandLine:
    parser = CommandLine(
        prog=PROG,
        description="Customer-support Telegram bot. Without a command: run the bot.",
        epilog=EPILOG,
        formatter_class=_wide,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add(sub, "run")
    webhook = _add(sub, "set-webhook")
    webhook.add_argument(
        "--certificate", type=Path, help="PEM certificate to upload (self-signed TLS in front of the bot)"
    )
    console = _add(sub, "console")
    console.add_argument("--chat-id", type=int, default=1, help="which session to use (default: 1)")
    _with_actions(sub, "chat", "show: the chat id (as the log's turn chat=… prints it)")
    knowledge = _with_actions(sub, "knowledge", 'search: the query, e.g. "how do I return it?"')
    knowledge.add_argument(
        "--explain", action="store_true", help="search: matched terms, score parts and why passages were cut"
    )
    knowledge.add_argument("--output", type=Path, help="faq export: write the Markdown to this file (default: print)")
    _actions_parser(sub)
    _with_actions(sub, "dead-letters", "show, replay, drop: the dead letter's ID (from list)")
    _with_actions(sub, "quarantine", "show, drop: the chat id (from list)")
    report = _add(sub, "report")
    report.add_argument("--days", type=days_count, default=7, metavar="N", help="the last N days, today included (7)")
    report.add_argument("--plot", type=Path, metavar="FILE", help="also draw the figures per day as a PNG chart")
    _add(sub, "help").add_argument(
        "topic", nargs="?", metavar="COMMAND", choices=[*DESCRIPTIONS], help="the command to explain"
    )
    parser.commands = dict(sub.choices)
    return parser


def parse_command_line(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed command (``run`` when none is given). ``help`` prints and exits 0; a wrong argument
    prints the command's usage and exits 2 (argparse)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args.command = DEFAULT
    if args.command == "help":
        target = parser if args.topic in (None, "help") else parser.commands[args.topic]
        target.print_help()
        raise SystemExit(0)
    action = getattr(args, "action", None)
    target_name = NEEDS_TARGET.get((args.command, action or ""))
    if target_name is not None and not args.target:
        parser.commands[args.command].error(f"{args.command} {action} needs {target_name}")
    if args.command == "actions":
        _check_actions(parser.commands["actions"], args)
    if args.command in NUMERIC_TARGET and args.target is not None:
        try:
            args.target = int(args.target)
        except ValueError:
            parser.commands[args.command].error(f"CHAT_ID must be a number, got {args.target!r}")
    return args
