"""Streams a reply into a private chat as it is generated, with Bot API ``sendMessageDraft``."""

from __future__ import annotations

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
    message is always sent with sendMessage."""

    def __init__(self, *, bot: Bot, chat_id: int, draft_id: int, interval: float) -> None:
        self._bot = bot
        self._chat_id = chat_id
        self._draft_id = draft_id or 1
        self._interval = interval
        self._parts: list[str] = []
        self._last_sent = 0.0
        self._shown = ""
        self.enabled = True
        self.sent = 0

    async def on_delta(self, delta: str) -> None:
        self._parts.append(delta)
        if self.enabled and time.monotonic() - self._last_sent >= self._interval:
            await self._show()

    async def _show(self) -> None:
        text = "".join(self._parts)
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
        except TelegramAPIError as exc:
            log.info("drafts off for chat %s: %s", self._chat_id, exc)
            self.enabled = False
            return
        self._shown = preview
        self.sent += 1
