"""Chat with the engine in a terminal, without Telegram: ``python -m bot console``.

Uses the same settings, store and LLM as the bot and prints the memory figures of every turn."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from bot.factory import Settings, build_engine, build_knowledge, open_backend
from services.engine.chat import ChatService
from services.engine.turns import TurnResult
from services.errors import SupportBotError

HELP = "Type a message. /new resets the chat, /quit leaves."


def describe(result: TurnResult) -> str:
    actual = result.usage.prompt_tokens if result.usage else "n/a"
    cached = result.usage.cached_tokens if result.usage else "n/a"
    compaction = result.forced_compaction or result.proactive_compaction
    summary = "updated" if result.summary_updated else ("present" if result.summary_present else "none")
    if compaction is not None and compaction.failed:
        summary += " (compaction failed, will retry)"
    knowledge = ""
    if result.knowledge_matched is not None:
        used = ", ".join(f"{s.passage.source} ({s.score:.2f})" for s in result.knowledge) or "none above the floor"
        knowledge = f" knowledge={used}"
    return (
        f"[stored={result.stored_messages} sent_history={result.context_history_messages} "
        f"removed={result.removed_history_messages} tokens est={result.estimated_tokens} actual={actual} "
        f"cached={cached} summary={summary}{knowledge}]"
    )


async def run_console(chat: ChatService, *, chat_id: int, stdin: TextIO, stdout: TextIO) -> None:
    stdout.write(HELP + "\n")
    loop = asyncio.get_running_loop()
    while True:
        stdout.write("you> ")
        stdout.flush()
        line = await loop.run_in_executor(None, stdin.readline)
        if not line:
            break
        message = line.strip()
        if not message:
            continue
        if message == "/quit":
            break
        if message == "/new":
            await chat.reset(chat_id)
            stdout.write("(conversation reset)\n")
            continue

        async def deliver(result: TurnResult) -> None:
            stdout.write(f"bot> {result.reply}\n")
            stdout.flush()

        try:
            result = await chat.handle(chat_id, message, deliver=deliver)
        except SupportBotError as exc:
            stdout.write(f"(error: {type(exc).__name__}: {exc})\n")
            continue
        stdout.write(describe(result) + "\n")


async def main(chat_id: int = 1) -> None:
    settings = Settings()
    backend = await open_backend(settings, offline=True)
    chat = build_engine(settings, backend.store, knowledge=build_knowledge(settings, backend), gaps=backend.gaps)
    try:
        await run_console(chat, chat_id=chat_id, stdin=sys.stdin, stdout=sys.stdout)
    finally:
        await chat.close()
        await backend.close()
