"""Which failures are worth retrying (the outside world comes back) and which are not. Backends
translate their libraries' errors at their edge (a Redis failure arrives as StoreUnavailableError, a
TransientError); only Telegram's own errors are named here, because this is Telegram's edge."""

from __future__ import annotations

from aiogram.exceptions import ClientDecodeError, TelegramNetworkError, TelegramRetryAfter, TelegramServerError

from services.core.errors import TransientError

_TRANSIENT: tuple[type[BaseException], ...] = (
    TransientError,
    TelegramNetworkError,
    TelegramServerError,
    TelegramRetryAfter,
    ClientDecodeError,  # not a Bot API answer: a proxy's error page or a cut body, as transient as a 5xx
    OSError,
)


def is_transient(exc: BaseException) -> bool:
    """True for failures after which a queued update is retried with backoff rather than answered."""
    return isinstance(exc, _TRANSIENT)
