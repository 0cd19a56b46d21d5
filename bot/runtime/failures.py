"""Which failures are worth retrying (the outside world comes back) and which are not."""

from __future__ import annotations

from aiogram.exceptions import TelegramNetworkError, TelegramRetryAfter, TelegramServerError
from redis.exceptions import RedisError

from services.errors import TransientError

_TRANSIENT: tuple[type[BaseException], ...] = (
    TransientError,
    TelegramNetworkError,
    TelegramServerError,
    TelegramRetryAfter,
    RedisError,
    OSError,
)


def is_transient(exc: BaseException) -> bool:
    """True for failures after which a queued update is retried with backoff rather than answered."""
    return isinstance(exc, _TRANSIENT)
