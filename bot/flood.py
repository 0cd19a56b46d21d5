"""Honour Telegram's flood control: wait ``retry_after`` seconds and retry instead of failing."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from aiogram.client.session.middlewares.base import BaseRequestMiddleware, NextRequestMiddlewareType
from aiogram.exceptions import TelegramRetryAfter
from aiogram.methods import TelegramMethod
from aiogram.methods.base import Response, TelegramType

if TYPE_CHECKING:
    from aiogram import Bot

log = logging.getLogger(__name__)


class RetryAfterMiddleware(BaseRequestMiddleware):
    def __init__(self, *, retries: int = 3, max_wait: float = 60.0) -> None:
        self._retries = retries
        self._max_wait = max_wait

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        for attempt in range(self._retries + 1):
            try:
                return await make_request(bot, method)
            except TelegramRetryAfter as exc:
                if attempt == self._retries or exc.retry_after > self._max_wait:
                    raise
                log.warning("flood control on %s: waiting %ss", type(method).__name__, exc.retry_after)
                await asyncio.sleep(exc.retry_after)
        raise AssertionError("unreachable")  # pragma: no cover
