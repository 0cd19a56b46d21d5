"""How far a knowledge build is: every file read and every batch embedded is an ``IndexProgress``
event, given to a ``ProgressSink`` (the bot logs a line every few seconds, or draws a bar in a
terminal). The library calls the sink from its reading thread as well as from the event loop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger("services.knowledge.library")

LOG_EVERY_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """``done`` of ``total`` files read (stage ``reading``) or passages embedded (``embedding``);
    ``passages``: passages cut so far."""

    stage: Literal["reading", "embedding"]
    done: int
    total: int
    passages: int

    def describe(self) -> str:
        if self.stage == "reading":
            return f"read {self.done} of {self.total} files, {self.passages} passages"
        return f"embedded {self.done} of {self.total} passages"


ProgressSink = Callable[[IndexProgress], None]


def no_progress(event: IndexProgress) -> None:
    """Tells nobody."""


class ProgressLog:
    """A sink that logs one INFO line at most every ``every`` seconds of a stage: a build of a second
    stays silent, a long one is never silent for longer than that."""

    def __init__(self, *, every: float = LOG_EVERY_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._every = every
        self._clock = clock
        self._stage: str | None = None
        self._last = 0.0
        self._logged = False

    def __call__(self, event: IndexProgress) -> None:
        now = self._clock()
        if event.stage != self._stage or event.done <= 1:  # a new stage (or a new build) starts the clock
            self._stage, self._last, self._logged = event.stage, now, False
            return
        finished = event.done >= event.total
        if now - self._last >= self._every or (finished and self._logged):  # a long stage's end is told too
            self._last, self._logged = now, True
            log.info("knowledge: %s%s", event.describe(), "; indexing" if finished and event.stage == "reading" else "")
