"""Keeps the Bot API response models aiogram builds, so that none is built twice.

aiogram validates every response as ``Response[<the method's return type>]``, a pydantic generic it
parametrizes on each request. pydantic caches parametrized generics only weakly, and nothing else
holds them, so the cyclic garbage collector drops them every few hundred requests and the next request
builds the class and its validator again, milliseconds of CPU each time (``benchmarks/load.py
--profile``). One reference per return type makes every request a cache hit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiogram.client.session.middlewares.base import BaseRequestMiddleware, NextRequestMiddlewareType
from aiogram.methods import TelegramMethod
from aiogram.methods.base import Response, TelegramType

if TYPE_CHECKING:
    from aiogram import Bot


class KeepResponseTypes(BaseRequestMiddleware):
    """Holds ``Response[T]`` for every return type ``T`` of the methods this bot has called."""

    def __init__(self) -> None:
        self.kept: dict[Any, type[Response[Any]]] = {}

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        returning = method.__returning__
        if returning not in self.kept:
            self.kept[returning] = Response[returning]  # type: ignore[valid-type]
        return await make_request(bot, method)
