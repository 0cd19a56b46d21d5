"""Which response format summary calls use, and reading a summary out of a reply.

Endpoints differ: strict structured output (json_schema), only json_object, or neither (the format
refused, or silently ignored). In ``auto`` the first call tries json_schema and falls back to
json_object, then to plain instructions, on a refusal (an HTTP error, 4xx or 5xx, whose body names
response_format: llama-cpp-python answers json_schema with a 500) or on a reply that is not JSON; the
result is remembered for the process. Replies are read leniently (the JSON may sit
in prose or a code fence) and validated against the summary schema."""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from pydantic import ValidationError

from services.core.summary_state import SummaryFormat, SummaryState

log = logging.getLogger(__name__)

FormatSetting = Literal["auto", "json_schema", "json_object", "plain"]
FALLBACK: tuple[SummaryFormat, ...] = ("json_schema", "json_object", "plain")


class FormatChoice:
    """The format in use: fixed by the setting, or detected in ``auto`` (only ever downgraded)."""

    def __init__(self, setting: FormatSetting = "auto") -> None:
        self.detecting = setting == "auto"
        self.current: SummaryFormat = "json_schema" if setting == "auto" else setting
        self._confirmed = not self.detecting

    def downgrade(self, tried: SummaryFormat, why: str) -> bool:
        """Fall back from ``tried`` to the next format; False when there is none (or not detecting)."""
        if not self.detecting or tried != self.current or tried == "plain":
            return False
        self.current = FALLBACK[FALLBACK.index(tried) + 1]
        log.warning("summary calls: %s unusable on this endpoint (%s); trying %s", tried, why, self.current)
        return True

    def confirm(self) -> None:
        """A valid summary came back in the current format: say once which one is used."""
        if not self._confirmed:
            self._confirmed = True
            log.info("summary calls use response format %s (detected)", self.current)


def _string_goes_on(char: str, escaped: bool) -> tuple[bool, bool]:
    """Inside a JSON string, after ``char``: (still inside it, the next character escaped)."""
    if escaped:
        return True, False
    if char == "\\":
        return True, True
    return char != '"', False


def _balanced_end(text: str, start: int) -> int | None:
    """The index of the ``}`` closing the ``{`` at ``start`` (strings and escapes respected), or None."""
    depth, in_string, escaped = 0, False, False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            in_string, escaped = _string_goes_on(char, escaped)
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def first_json_object(text: str) -> str | None:
    """The first balanced ``{...}`` of ``text`` that parses (strings and escapes respected), or None."""
    start = text.find("{")
    while start != -1:
        end = _balanced_end(text, start)
        if end is not None:
            candidate = text[start : end + 1]
            try:
                json.loads(candidate)
            except ValueError:
                pass
            else:
                return candidate
        start = text.find("{", start + 1)
    return None


def read_summary(text: str) -> tuple[SummaryState | None, bool, str]:
    """(summary or None, whether the reply was bare JSON, the problem). The JSON may be wrapped in prose
    or a code fence: the first balanced object that parses is taken."""
    stripped = text.strip()
    bare = True
    try:
        data: Any = json.loads(stripped)
    except ValueError:
        bare = False
        found = first_json_object(stripped)
        if found is None:
            return None, False, "no JSON object in the reply"
        data = json.loads(found)
    try:
        return SummaryState.model_validate(data), bare, ""
    except (ValidationError, TypeError) as exc:
        return None, bare, f"{type(exc).__name__}: {str(exc)[:200]}"
