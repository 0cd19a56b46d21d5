"""Support quality as plain data: one conversation's record and the report's figures, computed from
the records alone (docs/quality.md defines each figure and its denominator)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

Rating = Literal["yes", "no"]
RATINGS: tuple[Rating, ...] = ("yes", "no")


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation of one chat; times in ms (the store's clock), 0 = not yet. Its id is
    ``started_ms``: a customer message after /new or after CONVERSATION_GAP_SECONDS of quiet."""

    chat_id: int
    started_ms: int
    first_answer_ms: int = 0
    handed_off: bool = False
    asked_ms: int = 0
    rating: str = ""
    messages: int = 0
    private: bool = True

    @property
    def resolved(self) -> bool:
        """Resolved by the bot: it answered, no handoff, and not rated "No"."""
        return bool(self.first_answer_ms) and not self.handed_off and self.rating != "no"

    @property
    def first_answer_seconds(self) -> float | None:
        return (self.first_answer_ms - self.started_ms) / 1000 if self.first_answer_ms else None

    @property
    def day(self) -> str:
        """The UTC day it started (YYYY-MM-DD)."""
        return datetime.fromtimestamp(self.started_ms / 1000, UTC).strftime("%Y-%m-%d")

    def to_json(self) -> str:
        return json.dumps(
            {
                "started": self.started_ms,
                "first": self.first_answer_ms,
                "handed": int(self.handed_off),
                "asked": self.asked_ms,
                "rating": self.rating,
                "messages": self.messages,
                "private": int(self.private),
            }
        )

    @classmethod
    def from_json(cls, chat_id: int, raw: str | bytes) -> Conversation | None:
        """A stored record; None for one that cannot be read (the report skips it)."""
        try:
            data = json.loads(raw)
            return cls(
                chat_id=chat_id,
                started_ms=int(data["started"]),
                first_answer_ms=int(data.get("first") or 0),
                handed_off=bool(int(data.get("handed") or 0)),
                asked_ms=int(data.get("asked") or 0),
                rating=str(data.get("rating") or "") if data.get("rating") in RATINGS else "",
                messages=int(data.get("messages") or 0),
                private=bool(int(data.get("private", 1))),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


@dataclass(frozen=True, slots=True)
class Figures:
    """The report's figures over a set of conversations (one day, or the whole period)."""

    conversations: int
    resolved: int
    handed_off: int
    asked: int
    rated_yes: int
    rated_no: int
    messages: int
    first_answers: tuple[float, ...]

    @classmethod
    def of(cls, conversations: Iterable[Conversation]) -> Figures:
        items = list(conversations)
        answers = sorted(s for c in items if (s := c.first_answer_seconds) is not None)
        return cls(
            conversations=len(items),
            resolved=sum(c.resolved for c in items),
            handed_off=sum(c.handed_off for c in items),
            asked=sum(bool(c.asked_ms) for c in items),
            rated_yes=sum(c.rating == "yes" for c in items),
            rated_no=sum(c.rating == "no" for c in items),
            messages=sum(c.messages for c in items),
            first_answers=tuple(answers),
        )

    @property
    def rated(self) -> int:
        return self.rated_yes + self.rated_no

    @property
    def median_first_answer(self) -> float | None:
        return statistics.median(self.first_answers) if self.first_answers else None

    @property
    def p90_first_answer(self) -> float | None:
        return percentile(self.first_answers, 90)


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of sorted ``values`` (the smallest value with ``p`` % at or below it)."""
    if not values:
        return None
    return values[max(0, math.ceil(p / 100 * len(values)) - 1)]


def per_day(conversations: Iterable[Conversation]) -> dict[str, Figures]:
    """Figures per UTC day a conversation started, oldest first."""
    days: dict[str, list[Conversation]] = {}
    for conversation in conversations:
        days.setdefault(conversation.day, []).append(conversation)
    return {day: Figures.of(days[day]) for day in sorted(days)}
