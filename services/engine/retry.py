"""When to ask the model provider again: its own Retry-After first, else exponential backoff with jitter.

Pure (no I/O, no clock): the caller sleeps. Read by the LLM client for the retries inside one call and
by the queue worker for the attempts of one question."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

MAX_PROVIDER_WAIT = 600.0
"""A Retry-After beyond this is taken as this (a provider asking for hours is asking us to give up)."""


def retry_after_of(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the provider asked to wait: ``retry-after-ms`` (OpenAI, Azure) or ``retry-after``
    (seconds or an HTTP date, RFC 9110 10.2.3); None when neither is present and readable."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return _bounded(float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return _bounded(float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    return _bounded(when.timestamp() - (time.time() if now is None else now))


def _bounded(seconds: float) -> float | None:
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_PROVIDER_WAIT)
