"""Best-effort Bot API calls: the command menu, "typing…" and drafts are comforts, not the service.

A Bot API server may lack them (a 404 from a self-hosted server, a proxy, an older version), answer
with something that is not a Bot API answer (an HTML error page: ClientDecodeError), be unreachable or
slow. ``BestEffort``, a request middleware on the Bot session, bounds these calls by
OPTIONAL_CALL_TIMEOUT_SECONDS and turns any failure into OptionalCallFailed, logged once per method and
kind of failure; the callers go on without the call (empty polls are paced in ``poll_pacing``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

from aiogram.client.session.middlewares.base import BaseRequestMiddleware, NextRequestMiddlewareType
from aiogram.exceptions import TelegramAPIError
from aiogram.methods import (
    AnswerCallbackQuery,
    EditMessageReplyMarkup,
    SendChatAction,
    SendMessageDraft,
    SetMyCommands,
    TelegramMethod,
)
from aiogram.methods.base import Response, TelegramType

from bot.metrics import OPTIONAL_CALL_FAILURES
from services.core.errors import LeaseLostError

if TYPE_CHECKING:
    from aiogram import Bot

log = logging.getLogger(__name__)

OPTIONAL_METHODS = (SetMyCommands, SendChatAction, SendMessageDraft, AnswerCallbackQuery, EditMessageReplyMarkup)
"""Calls the bot serves customers without (a button press's toast and the pressed buttons' removal:
the decision is the ledger's, not theirs)."""


class OptionalCallFailed(TelegramAPIError):
    """An optional call did not succeed (already logged and counted); the caller drops it."""

    def __init__(self, method: TelegramMethod[Any], kind: str, detail: str) -> None:
        super().__init__(method=method, message=f"{kind}: {detail}")
        self.kind = kind


class BestEffort(BaseRequestMiddleware):
    """Optional calls: at most ``timeout`` seconds each; any failure becomes OptionalCallFailed.

    A lost lease (LeaseLostError) still ends the turn, as for any other call."""

    def __init__(self, *, timeout: float) -> None:
        self._timeout = timeout
        self.seen: set[tuple[str, str]] = set()
        """(method, kind) pairs already logged: later ones are logged at DEBUG only."""

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        optional = isinstance(method, OPTIONAL_METHODS)  # a flag: narrowing would lose TelegramType
        if not optional:
            return await make_request(bot, method)
        try:
            async with asyncio.timeout(self._timeout):
                return await make_request(bot, method)
        except LeaseLostError:
            raise
        except TimeoutError:
            raise self._failed(method, "timeout", f"no answer within {self._timeout}s") from None
        except Exception as exc:  # any failure of a comfort is dropped: that is the point
            raise self._failed(method, type(exc).__name__, _one_line(exc)) from exc

    def _failed(self, method: TelegramMethod[Any], kind: str, detail: str) -> OptionalCallFailed:
        name = method.__api_method__
        OPTIONAL_CALL_FAILURES.labels(method=name, kind=kind).inc()
        if (name, kind) not in self.seen:
            self.seen.add((name, kind))
            log.warning(
                "optional Bot API call %s failed (%s: %s); the bot goes on without it (logged once per "
                "method and kind; sb_optional_call_failures_total counts them all)",
                name,
                kind,
                detail,
            )
        else:
            log.debug("optional Bot API call %s failed again (%s)", name, kind)
        return OptionalCallFailed(method, kind, detail)


@asynccontextmanager
async def typing(bot: Bot, chat_id: int, *, every: float = 5.0) -> AsyncIterator[None]:
    """ "typing…" in the chat every ``every`` seconds while the block runs (Telegram shows it for 5 s).
    A failed call ends it for this block; leaving the block waits for the call in flight (bounded by
    BestEffort's timeout), so that "typing…" does not follow the answer."""
    stop = asyncio.Event()

    async def show() -> None:
        while not stop.is_set():
            try:
                await bot.send_chat_action(chat_id=chat_id, action="typing")
            except OptionalCallFailed:
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)

    task = asyncio.create_task(show(), name=f"typing-{chat_id}")
    try:
        yield
    finally:
        stop.set()
        (outcome,) = await asyncio.gather(task, return_exceptions=True)
        if isinstance(outcome, Exception):  # not a comfort's failure (BestEffort not installed?)
            log.warning("typing indicator for chat %s failed: %s", chat_id, _one_line(outcome))


def _one_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of what ``exc`` says, cut to ``limit`` characters (a decode error quotes the
    whole body it could not read)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return first[:limit]
