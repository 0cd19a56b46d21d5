"""A circuit breaker for summary calls: after repeated failures they stop for a cool-down (no model
call on every turn), then one trial call decides whether they resume. Pure code, clock injected."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class CircuitBreaker:
    """Closed: calls go through, failures in a row are counted. Open (``failures`` in a row reached):
    nothing goes through for ``cooldown`` seconds; then one trial (half-open): a success closes it,
    a failure opens it for another cool-down. A trial with no outcome (cancelled: ``release``; or
    never reported) cannot keep it open: after ``release``, or another cool-down, the next call tries."""

    def __init__(
        self,
        *,
        failures: int = 3,
        cooldown: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._threshold = max(1, failures)
        self._cooldown = cooldown
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_at: float | None = None
        self.on_change: Callable[[bool], None] = on_change or (lambda _open: None)
        """Told True when the breaker opens and False when it closes (the bot sets a gauge with it)."""

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def allow(self) -> bool:
        """Whether a call may be made now (an open breaker past its cool-down lets one trial through)."""
        if self._opened_at is None:
            return True
        now = self._clock()
        if now - self._opened_at < self._cooldown:
            return False
        if self._trial_at is not None and now - self._trial_at < self._cooldown:
            return False
        self._trial_at = now
        return True

    def release(self) -> None:
        """The trial, if one is running, ended without an outcome: the next call may be the trial."""
        self._trial_at = None

    def succeeded(self) -> None:
        self._failures = 0
        self._trial_at = None
        if self._opened_at is not None:
            self._opened_at = None
            log.info("summary calls work again: circuit closed")
            self.on_change(False)

    def failed(self) -> None:
        self._failures += 1
        reopen = self._trial_at is not None
        self._trial_at = None
        if reopen or (self._opened_at is None and self._failures >= self._threshold):
            was_open = self._opened_at is not None
            self._opened_at = self._clock()
            log.warning(
                "summary calls failed %d time(s) in a row: paused for %.0f s (turns leaving the window are "
                "kept by their identifiers meanwhile)",
                self._failures,
                self._cooldown,
            )
            if not was_open:
                self.on_change(True)
