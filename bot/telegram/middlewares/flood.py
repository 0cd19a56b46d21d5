"""Telegram's flood control (429 with ``retry_after``): only what the customer must receive waits.

Drafts (sendMessageDraft) and chat actions ("typing…") are previews: on 429 they fail at once (the
caller drops them) so they never hold back the real reply. Every other method, i.e. real messages,
waits ``retry_after`` and retries, at most ``retries`` times and ``max_wait`` seconds in total; past
that the 429 is raised and the update is handled as a transient failure."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from aiogram.client.session.middlewares.base import BaseRequestMiddleware, NextRequestMiddlewareType
from aiogram.exceptions import TelegramRetryAfter
from aiogram.methods import SendChatAction, SendMessageDraft, TelegramMethod
from aiogram.methods.base import Response, TelegramType

if TYPE_CHECKING:
    from aiogram import Bot

log = logging.getLogger(__name__)

PREVIEW_METHODS = (SendMessageDraft, SendChatAction)
"""Never retried on 429: losing one costs nothing, waiting for one delays the answer."""


def is_preview(method: TelegramMethod[Any]) -> bool:
    return isinstance(method, PREVIEW_METHODS)


class RetryAfterMiddleware(BaseRequestMiddleware):
    def __init__(self, *, retries: int = 3, max_wait: float = 30.0) -> None:
        self._retries = retries
        self._max_wait = max_wait

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        if is_preview(method):
            return await make_request(bot, method)
        deadline = time.monotonic() + self._max_wait
        for attempt in range(self._retries + 1):
            try:
                return await make_request(bot, method)
            except TelegramRetryAfter as exc:
                if attempt == self._retries or time.monotonic() + exc.retry_after > deadline:
                    log.warning(
                        "flood control on %s: retry_after=%ss is past the limit (FLOOD_RETRIES=%s, "
                        "FLOOD_MAX_WAIT_SECONDS=%s)",
                        type(method).__name__,
                        exc.retry_after,
                        self._retries,
                        self._max_wait,
                    )
                    raise
                log.warning("flood control on %s: waiting %ss", type(method).__name__, exc.retry_after)
                await asyncio.sleep(exc.retry_after)
        raise AssertionError("unreachable")  # pragma: no cover
