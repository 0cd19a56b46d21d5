"""The one error router: every engine error becomes a short message in the user's language."""

from __future__ import annotations

import logging

from aiogram import Bot, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.types import ErrorEvent, Message, Update, User

from bot.metrics import ERRORS
from bot.provider_health import ProviderWatch
from bot.serving.failures import is_transient
from bot.settings import BotSettings
from bot.telegram.download_notice import DownloadNotice
from bot.telegram.files import DownloadFailedError
from bot.telegram.texts import TEXTS, Texts, text
from services.core.errors import (
    ConcurrentUpdateError,
    LeaseLostError,
    LLMBadReplyError,
    LLMConfigurationError,
    LLMReplyTruncatedError,
    LLMUnavailableError,
    MediaError,
    MessageTooLongError,
    StoreError,
)
from services.core.fence import Fence

log = logging.getLogger(__name__)


def user_text_for(exc: BaseException, language: str) -> str:
    """The user-facing text for an exception. Never includes the exception's own message."""
    if isinstance(exc, MessageTooLongError):
        key = "too_long_chars" if exc.unit == "characters" else "too_long"
        return text(language, key, tokens=exc.tokens, limit=exc.limit)
    if isinstance(exc, MediaError):
        return media_text(exc, language)
    kinds: list[tuple[type[BaseException], str]] = [
        (LLMUnavailableError, "llm_unavailable"),
        (DownloadFailedError, "media_download_failed"),
        (LLMReplyTruncatedError, "reply_truncated"),
        (LLMBadReplyError, "bad_reply"),
        (ConcurrentUpdateError, "busy"),
        (StoreError, "store_unavailable"),
    ]
    for kind, key in kinds:
        if isinstance(exc, kind):
            return text(language, key)
    return text(language, "internal_error")


def media_text(exc: MediaError, language: str) -> str:
    """``media_<kind>_<reason>`` where a kind has its own text, else ``media_<reason>``."""
    if exc.reason == "off":
        return text(language, "text_only")
    specific = f"media_{exc.kind}_{exc.reason}"
    key = specific if specific in TEXTS["en"] else f"media_{exc.reason}"
    limit = exc.limit or 0
    if key == "media_too_big" and limit < 2**20:  # no byte limit known (the provider's, a pixel count)
        key = "media_too_big_any"
    if key == "media_too_long" and limit <= 0:  # the provider's own duration limit: not known here
        key = "media_too_long_any"
    return text(language, key if key in TEXTS["en"] else "media_unreadable", limit=limit, limit_mb=limit // 2**20)


_ANSWERED = (MessageTooLongError, LLMReplyTruncatedError, LLMBadReplyError, ConcurrentUpdateError, MediaError)
"""Failures of the customer's request itself: told to the customer, and the update is done."""


async def on_error(
    event: ErrorEvent,
    bot: Bot,
    settings: BotSettings,
    provider: ProviderWatch,
    queued: bool = False,
    transient_failures: int = 0,
    final_attempt: bool = True,
    fence: Fence | None = None,
    last_download_attempt: bool = False,
    download_notice: DownloadNotice | None = None,
) -> bool:
    """In queued mode only the customer's own failures are answered here; everything else goes back
        to the worker, which retries it (transient), or counts it and finally dead-letters it. Two
        transient failures the customer hears of at once, like this, while they are retried: the model
        unavailable, and their file not downloadable (given up, with a request to resend it, on the
        attempt the worker marks ``last_download_attempt``: MEDIA_DOWNLOAD_GIVE_UP_SECONDS). ``provider``
    (the dispatcher's, required: a dispatcher without one fails every error, not silently) hears of a
    refused chat call."""
    exc = event.exception
    ERRORS.labels(type(exc).__name__).inc()
    if isinstance(exc, LLMConfigurationError):
        provider.refused("chat", exc.status, str(exc))  # the operator must act: ERROR line, metric, /readyz
    update = event.update
    if not queued:
        await _tell(bot, update, exc, settings, None)
        return True
    if isinstance(exc, LeaseLostError):
        raise exc  # abandoned to the chat's new owner: nothing more is sent from here
    if isinstance(exc, (LLMUnavailableError, DownloadFailedError)):
        # the file's notice may have gone already, while the download was slow (``download_notice``)
        told = isinstance(exc, DownloadFailedError) and download_notice is not None and download_notice.sent
        first = transient_failures == 0 and not told
        if await _notice(bot, update, exc, settings, fence, first=first, last=last_download_attempt):
            return True
        raise exc
    if is_transient(exc):
        raise exc
    if isinstance(exc, _ANSWERED):
        await _tell(bot, update, exc, settings, fence)
        return True
    if final_attempt:  # the worker dead-letters it now: the customer hears something
        await _tell(bot, update, exc, settings, fence)
    raise exc


async def _notice(
    bot: Bot, update: Update, exc: BaseException, settings: BotSettings, fence: Fence | None, *, first: bool, last: bool
) -> bool:
    """A transient failure the customer hears of while it is retried, once (on its ``first`` failure):
    the question waits, it is not lost. True when the update ends here instead: a file that has failed
    to download for MEDIA_DOWNLOAD_GIVE_UP_SECONDS (``last``) is given up with a request to resend it,
    so the chat's later messages do not wait for it."""
    if isinstance(exc, DownloadFailedError) and last:
        await _tell(bot, update, exc, settings, fence)
        return True
    if first:
        key = "media_download_retrying" if isinstance(exc, DownloadFailedError) else "llm_retrying"
        await _tell(bot, update, exc, settings, fence, key=key)
    return False


async def _tell(
    bot: Bot, update: Update, exc: BaseException, settings: BotSettings, fence: Fence | None, key: str | None = None
) -> None:
    if isinstance(exc, (*_ANSWERED, LLMUnavailableError, StoreError, DownloadFailedError)):
        log.warning("update %s failed: %s: %s", update.update_id, type(exc).__name__, exc)
    else:
        log.error("update %s failed with an unexpected error", update.update_id, exc_info=exc)
    told = _told(update, settings)
    if told is None:
        return
    chat_id, user = told
    say = Texts.for_user(user, settings)
    if fence is not None:
        fence.ensure_valid()
    try:
        await bot.send_message(chat_id, say(key) if key else user_text_for(exc, say.language))
    except TelegramAPIError as send_error:
        log.warning("could not tell chat %s about the error: %s", chat_id, send_error)


def _told(update: Update, settings: BotSettings) -> tuple[int, User | None] | None:
    """Who hears of a failure: the chat of the message, or of a customer's pressed button (an
    operator's press on an approval card: nobody here, the operators' group is not a customer)."""
    if update.message is not None:
        return update.message.chat.id, update.message.from_user
    query = update.callback_query
    pressed = query.message if query is not None else None
    if query is None or not isinstance(pressed, Message) or pressed.chat.id == settings.operator_chat_id:
        return None
    return pressed.chat.id, query.from_user


def make_router() -> Router:
    router = Router(name="errors")
    router.errors.register(on_error)
    return router
