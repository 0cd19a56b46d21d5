"""Streams a reply into a private chat as it is generated, with Bot API ``sendMessageDraft``."""

from __future__ import annotations

import asyncio
import logging
import time

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError

from bot.telegram.render import TELEGRAM_TEXT_LIMIT
from bot.telegram.utf16 import utf16_tail

log = logging.getLogger(__name__)


class DraftStreamer:
    """Collects text deltas and shows them as a draft at most every ``interval`` seconds.

    Drafts are a preview only: a failure to send one (flood control included: drafts are never retried
    on 429, see bot.telegram.middlewares.flood) is logged and turns drafts off for this reply; the final
    message is always sent with sendMessage. A draft goes out in a task of its own, one at a time, so
    the model's stream is read on while Telegram answers; ``finish`` waits for the one in flight before
    the reply is sent; when the turn fails, ``settle`` waits for it before the error text (or
    ``abandon`` drops it when nothing more may go out)."""

    def __init__(self, *, bot: Bot, chat_id: int, draft_id: int, interval: float) -> None:
        self._bot = bot
        self._chat_id = chat_id
        self._draft_id = draft_id or 1
        self._interval = interval
        self._parts: list[str] = []
        self._last_sent = 0.0
        self._shown = ""
        self._in_flight: asyncio.Task[None] | None = None
        self.enabled = True
        self.sent = 0

    async def on_delta(self, delta: str) -> None:
        self._parts.append(delta)
        if self._in_flight is not None:
            if not self._in_flight.done():
                return
            # what the last draft raised besides a refusal (a lost lease) ends the turn, as it would inline
            done, self._in_flight = self._in_flight, None
            done.result()
        if self.enabled and time.monotonic() - self._last_sent >= self._interval:
            self._in_flight = asyncio.create_task(self._show("".join(self._parts)))

    def restart(self) -> None:
        """The reply is produced again (the engine retried the turn): the text so far is void and the
        next draft shows the new attempt only (a draft in flight may still show the old text)."""
        self._parts.clear()

    async def finish(self) -> None:
        """Wait for the draft in flight, so that the reply is not overtaken by it; re-raises what it
        raised besides a refusal. No draft starts after this."""
        if (in_flight := self._stop()) is not None:
            await in_flight

    async def settle(self, within: float) -> None:
        """The turn failed: wait up to ``within`` seconds for the draft in flight (so that the error
        text sent next is not overtaken by it), then cancel it; what it raised is dropped (the turn's
        own error is the one that counts)."""
        if (in_flight := self._stop()) is not None:
            try:
                await asyncio.wait([in_flight], timeout=within)
            finally:
                await _drop(in_flight)

    async def abandon(self) -> None:
        """Cancel the draft in flight, whatever it became (the turn was cancelled or lost its lease:
        nothing more goes out for it)."""
        if (in_flight := self._stop()) is not None:
            await _drop(in_flight)

    def _stop(self) -> asyncio.Task[None] | None:
        """No draft starts from now on; returns the one in flight, if any, for the caller to end."""
        self.enabled = False
        in_flight, self._in_flight = self._in_flight, None
        return in_flight

    async def _show(self, text: str) -> None:
        # a draft is plain text (partial Markdown may not parse); show the newest 4096 UTF-16 units,
        # Telegram's measure (an emoji counts 2)
        preview = utf16_tail(text, TELEGRAM_TEXT_LIMIT)
        if not preview.strip() or preview == self._shown:
            return
        self._last_sent = time.monotonic()
        try:
            await self._bot.send_message_draft(
                chat_id=self._chat_id, draft_id=self._draft_id, text=preview, parse_mode=None
            )
        except TelegramAPIError as exc:  # OptionalCallFailed included: BestEffort logged it once per cause
            log.debug("drafts off for chat %s: %s", self._chat_id, exc)
            self.enabled = False
            return
        self._shown = preview
        self.sent += 1


async def _drop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` if it still runs, wait for it, and retrieve what it raised."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()
