"""Empty polls paced: a Bot API server that does not long-poll answers getUpdates at once with
nothing; ``PaceEmptyPolls``, a request middleware on the Bot session, keeps the polling loop from
asking it again in a tight loop (POLLING_MIN_INTERVAL_SECONDS)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from aiogram.client.session.middlewares.base import BaseRequestMiddleware, NextRequestMiddlewareType
from aiogram.methods import GetUpdates, TelegramMethod
from aiogram.methods.base import Response, TelegramType

if TYPE_CHECKING:
    from aiogram import Bot

log = logging.getLogger(__name__)


class PaceEmptyPolls(BaseRequestMiddleware):
    """An empty getUpdates answer that came sooner than ``min_interval`` seconds after the request is
    held back for the rest of it: a server that does not long-poll is asked at most once per interval.
    A long-polling server answers empty only after its timeout, so this never delays it."""

    def __init__(self, *, min_interval: float) -> None:
        self._min_interval = min_interval
        self.paced = 0

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        polls = isinstance(method, GetUpdates)  # a flag: narrowing would lose TelegramType
        if not polls or self._min_interval <= 0:
            return await make_request(bot, method)
        started = time.monotonic()
        response = await make_request(bot, method)
        updates: Any = response  # the session hands the result itself up the chain (aiogram types it Response)
        left = self._min_interval - (time.monotonic() - started)
        if not updates and left > 0:
            if not self.paced:
                log.warning(
                    "getUpdates answered at once with nothing (the Bot API server does not long-poll): "
                    "empty polls are paced to one per POLLING_MIN_INTERVAL_SECONDS=%s",
                    self._min_interval,
                )
            self.paced += 1
            await asyncio.sleep(left)
        return response
