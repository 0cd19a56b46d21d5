"""The one error router: every engine error becomes a short message in the user's language."""

from __future__ import annotations

import logging

from aiogram import Bot, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.types import ErrorEvent

from bot.failures import is_transient
from bot.settings import BotSettings
from bot.texts import language_of, text
from services.errors import (
    ConcurrentUpdateError,
    LeaseLostError,
    LLMBadReplyError,
    LLMReplyTruncatedError,
    LLMUnavailableError,
    MessageTooLongError,
    StoreError,
)
from services.metrics import ERRORS

log = logging.getLogger(__name__)


def user_text_for(exc: BaseException, language: str) -> str:
    """The user-facing text for an exception. Never includes the exception's own message."""
    if isinstance(exc, MessageTooLongError):
        key = "too_long_chars" if exc.unit == "characters" else "too_long"
        return text(language, key, tokens=exc.tokens, limit=exc.limit)
    kinds: list[tuple[type[BaseException], str]] = [
        (LLMUnavailableError, "llm_unavailable"),
        (LLMReplyTruncatedError, "reply_truncated"),
        (LLMBadReplyError, "bad_reply"),
        (ConcurrentUpdateError, "busy"),
        (StoreError, "store_unavailable"),
    ]
    for kind, key in kinds:
        if isinstance(exc, kind):
            return text(language, key)
    return text(language, "internal_error")


async def on_error(event: ErrorEvent, bot: Bot, settings: BotSettings, queued: bool = False) -> bool:
    exc = event.exception
    ERRORS.labels(type(exc).__name__).inc()
    if queued and (is_transient(exc) or isinstance(exc, LeaseLostError)):
        raise exc  # the worker retries the update later, or abandons it to the chat's new owner
    update = event.update
    message = update.message
    expected = isinstance(
        exc,
        MessageTooLongError
        | LLMUnavailableError
        | LLMReplyTruncatedError
        | LLMBadReplyError
        | ConcurrentUpdateError
        | StoreError,
    )
    if expected:
        log.warning("update %s failed: %s: %s", update.update_id, type(exc).__name__, exc)
    else:
        log.error("update %s failed with an unexpected error", update.update_id, exc_info=exc)
    if message is None:
        return True
    try:
        await bot.send_message(
            message.chat.id, user_text_for(exc, language_of(message.from_user, settings)), parse_mode=None
        )
    except TelegramAPIError as send_error:
        log.warning("could not tell chat %s about the error: %s", message.chat.id, send_error)
    return True


def make_router() -> Router:
    router = Router(name="errors")
    router.errors.register(on_error)
    return router
