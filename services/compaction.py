"""When and how much of the oldest history to fold into the summary. Planning is pure code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.models import StoredMessage


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """Water marks are fractions of the history room (budget minus instruction and summary cap)."""

    high_water: float = 0.85
    low_water: float = 0.5
    min_verbatim_turns: int = 4

    def __post_init__(self) -> None:
        if not 0 < self.low_water < self.high_water <= 1:
            raise ValueError("need 0 < HISTORY_LOW_WATER < HISTORY_HIGH_WATER <= 1")
        if self.min_verbatim_turns < 0:
            raise ValueError("HISTORY_MIN_VERBATIM_TURNS must be >= 0")

    def over_high_water(self, history_tokens: int, room: int) -> bool:
        return history_tokens > self.high_water * room

    def plan_fold(self, history: Sequence[StoredMessage], *, room: int, must_fit: int | None = None) -> int:
        """How many of the oldest messages (whole turns) to fold.

        Folds oldest turns until the rest is at most ``low_water * room`` (and within ``must_fit``,
        the room the current prompt leaves for history), but keeps the newest
        ``min_verbatim_turns`` turns verbatim as long as they fit in ``must_fit`` (default ``room``).
        """
        limit = room if must_fit is None else must_fit
        goal = min(self.low_water * room, limit)
        remaining = sum(m.tokens for m in history)
        turns_left = len(history) // 2
        fold = 0
        while turns_left > 0:
            if remaining <= goal:
                break
            if turns_left <= self.min_verbatim_turns and remaining <= limit:
                break
            remaining -= history[fold].tokens + history[fold + 1].tokens
            fold += 2
            turns_left -= 1
        return fold
