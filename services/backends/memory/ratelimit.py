"""InMemoryRateLimiter: the per-chat sliding-window limit of one process (``services.ports.ratelimit``)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from services.ports.ratelimit import RATE_WINDOW_SECONDS, RateDecision


@dataclass
class _Window:
    hits: deque[float] = field(default_factory=deque)
    keys: deque[str | None] = field(default_factory=deque)
    notified_until: float = 0.0


class InMemoryRateLimiter:
    """Same rule for one process."""

    def __init__(self, *, per_minute: int) -> None:
        self._limit = per_minute
        self._chats: dict[int, _Window] = {}

    async def hit(self, chat_id: int, *, key: str | None = None) -> RateDecision:
        if self._limit <= 0:
            return RateDecision(True)
        now = time.monotonic()
        window = self._chats.setdefault(chat_id, _Window())
        while window.hits and window.hits[0] <= now - RATE_WINDOW_SECONDS:
            window.hits.popleft()
            window.keys.popleft()
        if key is not None and key in window.keys:
            return RateDecision(True)
        if len(window.hits) < self._limit:
            window.hits.append(now)
            window.keys.append(key)
            return RateDecision(True)
        wait = window.hits[0] + RATE_WINDOW_SECONDS - now
        notify = now >= window.notified_until
        if notify:
            window.notified_until = now + wait
        return RateDecision(False, notify, wait)

    async def forget(self, chat_id: int) -> None:
        self._chats.pop(chat_id, None)
