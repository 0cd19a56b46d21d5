"""When to ask the model provider again: its own Retry-After first, else exponential backoff with jitter.

Pure (no I/O, no clock): the caller sleeps. Read by the LLM client for the retries inside one call and
by the queue worker for the attempts of one question."""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class RequestBudget:
    """The model requests of one attempt at a question: ``cap`` what LLM_MAX_REQUESTS_PER_QUESTION leaves
    it after earlier attempts, ``made`` every request it made (chat and summary, answered or not). The
    chat call stops retrying at the cap; the queue worker adds ``made`` to the question's record."""

    cap: int
    made: int = 0


REQUEST_BUDGET: ContextVar[RequestBudget | None] = ContextVar("sb_model_request_budget", default=None)
"""The budget of the question being answered (set by the queue worker); None: only the policy's cap."""

MAX_PROVIDER_WAIT = 600.0
"""A Retry-After beyond this is taken as this (a provider asking for hours is asking us to give up)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one model call is retried (OPENAI_MAX_RETRIES, LLM_RETRY_*): equal-jitter exponential backoff
    from ``base_seconds`` up to ``max_seconds``, never sooner than the provider's Retry-After; a wait
    over ``in_call_max_wait_seconds`` or past ``deadline_seconds`` from the call's start is not slept
    (the caller is told how long to wait). The default retries nothing."""

    max_retries: int = 0
    base_seconds: float = 1.0
    max_seconds: float = 120.0
    in_call_max_wait_seconds: float = 10.0
    deadline_seconds: float = 180.0

    def backoff(self, attempt: int, rand: Callable[[], float]) -> float:
        """The wait after failed attempt ``attempt`` (0-based): half of the capped exponential step,
        plus a random share of the other half (equal jitter: spread out, never near zero)."""
        step = min(self.max_seconds, self.base_seconds * 2.0 ** min(attempt, 64))
        return step / 2 + rand() * step / 2

    def wait(self, attempt: int, *, retry_after: float | None, rand: Callable[[], float]) -> float:
        return max(self.backoff(attempt, rand), retry_after or 0.0)

    def sleeps(self, wait: float, *, elapsed: float) -> bool:
        """Whether ``wait`` is slept within a call that has run ``elapsed`` seconds."""
        return wait <= self.in_call_max_wait_seconds and elapsed + wait <= self.deadline_seconds


def retry_after_of(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the provider asked to wait: ``retry-after-ms`` (OpenAI, Azure) or ``retry-after``
    (seconds or an HTTP date, RFC 9110 10.2.3); None when neither is present and readable. A malformed
    value (``nan``, ``inf``, ``-1``, ``abc``, empty) is no answer: the next header is read."""
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return min(ms / 1000, MAX_PROVIDER_WAIT)
    raw = headers.get("retry-after")
    if not raw:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return min(seconds, MAX_PROVIDER_WAIT)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    waited = when.timestamp() - (time.time() if now is None else now)
    return min(max(waited, 0.0), MAX_PROVIDER_WAIT)  # a date already past: ask again now


_NUMBER = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
"""A header's delay: plain decimal digits (RFC 9110 ``delay-seconds`` is ``1*DIGIT``; ``retry-after-ms``
may carry a fraction). Not ``float()``: it also reads ``nan``, ``inf``, ``-1``, ``1e400`` and ``7_000``."""


def _number(raw: str | None) -> float | None:
    if not raw or not _NUMBER.fullmatch(raw.strip()):
        return None
    return float(raw)
