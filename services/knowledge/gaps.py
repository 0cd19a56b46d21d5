"""How an unanswered question is recorded for operators: normalized (case, spacing) and capped."""

from __future__ import annotations

import re

QUESTION_CHARS = 300
GAPS_KEPT = 1000
"""The most asked questions kept; rarer ones drop out first."""


def normalize_question(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()[:QUESTION_CHARS]
