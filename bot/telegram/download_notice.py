"""The customer's "still fetching your file" notice: sent once per update, after ``DOWNLOAD_NOTICE_SECONDS``
of waiting for a file or at the download's first failure, whichever comes first. A file server that
fails at once, hangs, or crawls (bytes often enough never to trip the stall timeout) is heard of in
seconds either way, not after the download's own timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiogram import BaseMiddleware, Bot
from aiogram.types import TelegramObject

T = TypeVar("T")

DOWNLOAD_NOTICE_SECONDS = 5.0
"""How long a customer's files may take before they are told (a photo comes in well under a second)."""


@dataclass
class DownloadNotice:
    """Whether this update's customer was told already (the media handler and the error handler share it)."""

    sent: bool = False


class DownloadNoticeMiddleware(BaseMiddleware):
    """Gives every update its own ``download_notice``. An update-level outer middleware, inside aiogram's
    errors middleware: the data it adds is the same dict the error handler gets."""

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        data["download_notice"] = DownloadNotice()
        return await handler(event, data)


def tell_once(
    notice: DownloadNotice, bot: Bot, chat_id: int, text: str, *, told_before: bool = False
) -> Callable[[], Awaitable[None]]:
    """The ``on_slow`` of an update's downloads: ``text`` sent to the customer once (not at all if
    ``told_before``: an earlier attempt's failure told them already)."""

    async def slow() -> None:
        if notice.sent or told_before:
            return
        notice.sent = True
        await bot.send_message(chat_id, text)

    return slow


async def told_if_slow(work: Awaitable[T], on_slow: Callable[[], Awaitable[None]], after: float) -> T:
    """``work``'s result; if it is not in after ``after`` seconds, ``on_slow`` runs while it goes on."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=after)
        if not done:
            await on_slow()
        return await task
    finally:
        if not task.done():
            task.cancel()
