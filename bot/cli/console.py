"""Chat with the engine in a terminal, without Telegram: ``python -m bot console``.

Uses the same settings, store and LLM as the bot and prints the memory figures of every turn."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from bot.backends import open_backend
from bot.cli import console_media
from bot.factory import Settings, build_core
from bot.telegram.handlers.errors import media_text
from services.core.errors import MediaError, SupportBotError
from services.core.turn_media import TurnMedia
from services.core.turns import TurnResult
from services.engine.chat import ChatService
from services.media.reader import MediaReader

HELP = f"Type a message. {console_media.USAGE}; /new resets the chat, /quit leaves."


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


async def _media(reader: MediaReader | None, chat_id: int, line: console_media.MediaLine | str) -> TurnMedia | str:
    """The turn's media for a /photo or /file line, or what to print instead (refused, unreadable)."""
    if isinstance(line, str):
        return line
    if reader is None:
        return "media are off: set IMAGES_ENABLED, VOICE_ENABLED or DOCUMENTS_ENABLED"
    try:
        return await console_media.read(reader, chat_id, line)
    except MediaError as exc:
        return f"refused: {exc.kind} {exc.reason}; the customer would be told: {media_text(exc, 'en')}"
    except OSError as exc:
        return f"cannot read {line.path}: {exc.strerror or type(exc).__name__}"


async def _turn(chat: ChatService, chat_id: int, message: str, reader: MediaReader | None, stdout: TextIO) -> None:
    text, media = message, None
    line = console_media.parse(message)
    if line is not None:
        found = await _media(reader, chat_id, line)
        if isinstance(found, str):
            stdout.write(f"({found})\n")
            return
        text, media = (line.caption if isinstance(line, console_media.MediaLine) else ""), found

    async def deliver(result: TurnResult) -> None:
        stdout.write(f"bot> {result.reply}\n")
        stdout.flush()

    try:
        result = await chat.handle(chat_id, text, deliver=deliver, media=media)
    except SupportBotError as exc:
        stdout.write(f"(error: {type(exc).__name__}: {exc})\n")
        return
    stdout.write(describe(result) + "\n")


async def run_console(
    chat: ChatService, *, chat_id: int, stdin: TextIO, stdout: TextIO, media: MediaReader | None = None
) -> None:
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
        await _turn(chat, chat_id, message, media, stdout)


async def main(chat_id: int = 1) -> None:
    settings = Settings()
    backend = await open_backend(settings, offline=True)
    core = build_core(settings, backend)  # the bot's own, without Telegram
    try:
        await run_console(core.chat, chat_id=chat_id, stdin=sys.stdin, stdout=sys.stdout, media=core.media)
    finally:
        await core.close()
        await backend.close()
