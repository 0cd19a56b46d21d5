"""How an unanswered question is recorded for operators: normalized (case, spacing) and capped, and
only when it asks about something (two content words or more): "thanks!" and "hello" are no gaps."""

from __future__ import annotations

import re

from services.knowledge.analysis import content_terms, terms

_SPACES = re.compile(r"\s+")
QUESTION_CHARS = 300
GAPS_KEPT = 1000
"""The most asked questions kept; rarer ones drop out first."""


def normalize_question(text: str) -> str:
    return _SPACES.sub(" ", text).strip().casefold()[:QUESTION_CHARS]


def worth_recording(text: str) -> bool:
    return len(set(content_terms(terms(text)))) >= 2
