"""When and how much of the oldest history to fold into the summary (the Compactor's pluggable
policy: a trigger and a plan). Planning is pure code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from services.core.records import StoredMessage


class CompactionPolicy(Protocol):
    """Decides when the stored history is folded (trigger) and how many of the oldest messages (plan)."""

    def should_compact(self, history_tokens: int, stored_messages: int, room: int) -> bool:
        """Proactive compaction after a reply: is the stored verbatim history due to be folded?"""
        ...

    def plan_fold(self, history: Sequence[StoredMessage], *, room: int, must_fit: int | None = None) -> int:
        """How many of the oldest messages (whole turns, an even number) to fold; 0 for none.
        ``must_fit``: the room the current prompt leaves for history (forced compaction)."""
        ...


@dataclass(frozen=True, slots=True)
class WaterMarkPolicy:
    """Water marks are fractions of the history room (budget minus instruction and summary cap).

    Defaults match MemorySettings (chosen with benchmarks/tokens.py: see benchmarks/RESULTS.md)."""

    high_water: float = 0.3
    low_water: float = 0.15
    min_verbatim_turns: int = 4
    min_fold_turns: int = 2
    """A proactive compaction waits until it can fold at least this many turns: a summary call has a
    fixed cost (instruction + previous summary), so folding one short turn per reply is waste."""

    def __post_init__(self) -> None:
        if not 0 < self.low_water < self.high_water <= 1:
            raise ValueError("need 0 < HISTORY_LOW_WATER < HISTORY_HIGH_WATER <= 1")
        if self.min_verbatim_turns < 0:
            raise ValueError("HISTORY_MIN_VERBATIM_TURNS must be >= 0")
        if self.min_fold_turns < 1:
            raise ValueError("min_fold_turns must be >= 1")

    def over_high_water(self, history_tokens: int, room: int) -> bool:
        return history_tokens > self.high_water * room

    def should_compact(self, history_tokens: int, stored_messages: int, room: int) -> bool:
        """Proactive compaction: over the high-water mark, with enough turns stored that it can fold
        ``min_fold_turns`` and still keep ``min_verbatim_turns`` verbatim."""
        enough_turns = stored_messages // 2 >= self.min_verbatim_turns + self.min_fold_turns
        return enough_turns and self.over_high_water(history_tokens, room)

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
