"""The rate limiter contract: a per-chat sliding window of one minute, and its decision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

RATE_WINDOW_SECONDS = 60


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    notify: bool = False
    """Refused, and the first refusal of this window: tell the customer once."""
    retry_after: float = 0.0


class RateLimiter(Protocol):
    """Per-chat message rate limit (a sliding window of one minute)."""

    async def hit(self, chat_id: int, *, key: str | None = None) -> RateDecision:
        """Count one message of the chat. The same ``key`` (an update id) is counted once: a retried
        update is never refused because of its own earlier attempt."""
        ...

    async def forget(self, chat_id: int) -> None: ...
