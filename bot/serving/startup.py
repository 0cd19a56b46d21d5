"""Start-up checks: retried while the failure may pass (network), one clear line when it will not."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)

from bot.settings import BotSettings
from services.core.errors import SupportBotError, TransientError

log = logging.getLogger(__name__)

T = TypeVar("T")


HINTS = {
    "Telegram": ": check TELEGRAM_API_URL (unset: api.telegram.org) and this host's network",
    "Redis": ": check REDIS_URL and that Redis runs",
}
"""What to check when a start-up call to a server keeps failing, by the last word of the call's name."""


class StartupError(SupportBotError):
    """The process cannot start; the message is the one line the operator needs."""


def cannot_listen(setting: str, host: str, port: int, exc: OSError, *, tries: int = 1) -> StartupError:
    """The one line for a port the process cannot listen on, naming the setting and the way out."""
    if exc.errno != errno.EADDRINUSE:
        reason = exc.strerror or type(exc).__name__
        return StartupError(f"cannot listen on {host}:{port} ({setting}): {reason}: check the address and {setting}")
    where = f"{host}:{port}" if tries == 1 else f"{host}:{port}-{port + tries - 1} ({setting}_TRIES={tries})"
    fix = f"another process holds it: give each process on a host its own {setting}, e.g. {setting}={port + tries}"
    if setting == "METRICS_PORT":
        fix += ", raise METRICS_PORT_TRIES, or METRICS_PORT=0 to run without /metrics, /healthz and /readyz"
    return StartupError(f"cannot listen on {where} ({setting}): address already in use: {fix}")


def metrics_port_error(settings: BotSettings, exc: OSError) -> StartupError:
    """``cannot_listen`` for the ops server (METRICS_PORT, METRICS_PORT_TRIES)."""
    host, port, tries = settings.metrics_host, settings.metrics_port, settings.metrics_port_tries
    return cannot_listen("METRICS_PORT", host, port, exc, tries=tries)


def not_a_bot_api(exc: ClientDecodeError | TelegramNotFound) -> str:
    """The one line for a server that answers, but not like a Bot API (its text is not shown: it may
    quote the request, whose URL holds the bot token)."""
    answer = "not JSON" if isinstance(exc, ClientDecodeError) else "404 Not Found"
    return (
        f"TELEGRAM_API_URL does not answer like a Telegram Bot API ({answer}): set it to a Bot API server's "
        "address (e.g. http://127.0.0.1:8081 for a self-hosted telegram-bot-api) or unset it for Telegram's "
        "own; with it unset, check BOT_TOKEN"
    )


async def with_startup_retries(
    what: str, call: Callable[[], Awaitable[T]], *, attempts: int = 5, first_delay: float = 0.5
) -> T:
    """Run ``call``; retry network failures with backoff, then give up with a StartupError naming the
    setting to check (HINTS, by ``what``)."""
    delay = first_delay
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except TelegramUnauthorizedError:
            raise StartupError(
                f"{what}: Telegram refused BOT_TOKEN (401 Unauthorized): copy the token again from @BotFather"
            ) from None
        except (
            TransientError,
            TelegramNetworkError,
            TelegramServerError,
            TelegramRetryAfter,
            OSError,
            TimeoutError,
        ) as exc:
            if attempt == attempts:
                hint = HINTS.get(what.split()[-1], "")
                raise StartupError(f"{what}: still failing after {attempts} attempts: {exc}{hint}") from None
            log.warning("%s failed (%s); retrying in %.1fs", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 8.0)
        except (ClientDecodeError, TelegramNotFound) as exc:  # answered, but not as a Bot API answers
            raise StartupError(f"{what}: {not_a_bot_api(exc)}") from None
        except TelegramAPIError as exc:  # a Bot API that refuses the call: its description, no token in it
            raise StartupError(f"{what}: the Bot API refused it ({type(exc).__name__}: {exc.message})") from None
    raise AssertionError("unreachable")  # pragma: no cover
