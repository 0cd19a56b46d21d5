"""Start-up checks: retried while the failure may pass (network), one clear line when it will not."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiogram.exceptions import TelegramNetworkError, TelegramServerError, TelegramUnauthorizedError

from services.errors import SupportBotError, TransientError

log = logging.getLogger(__name__)

T = TypeVar("T")


class StartupError(SupportBotError):
    """The process cannot start; the message is the one line the operator needs."""


async def with_startup_retries(
    what: str, call: Callable[[], Awaitable[T]], *, attempts: int = 5, first_delay: float = 0.5
) -> T:
    """Run ``call``; retry network failures with backoff, then give up with a StartupError."""
    delay = first_delay
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except TelegramUnauthorizedError:
            raise StartupError(f"{what}: Telegram refused BOT_TOKEN (401 Unauthorized)") from None
        except (TransientError, TelegramNetworkError, TelegramServerError, OSError, TimeoutError) as exc:
            if attempt == attempts:
                raise StartupError(f"{what}: still failing after {attempts} attempts: {exc}") from None
            log.warning("%s failed (%s); retrying in %.1fs", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 8.0)
    raise AssertionError("unreachable")  # pragma: no cover
