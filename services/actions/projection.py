"""What of a response the model sees: only the tool's ``result`` paths (field names joined by dots,
``*`` for every item of a list, a number for one item), each value trimmed (long strings cut, long
lists shortened) and the whole capped; and the compact line the turn remembers it by."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

STRING_CHARS = 300
LIST_ITEMS = 20
DEPTH = 4
NOTE_CHARS = 2000
LINE_CHARS = 240
_MISSING = object()


def _walk(value: Any, parts: Sequence[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if head == "*":
        if not isinstance(value, list):
            return _MISSING
        found = [_walk(item, rest) for item in value]
        return [item for item in found if item is not _MISSING]
    if isinstance(value, Mapping) and head in value:
        return _walk(value[head], rest)
    if isinstance(value, list) and head.isdigit() and int(head) < len(value):
        return _walk(value[int(head)], rest)
    return _MISSING


def trim(value: Any, depth: int = 0) -> Any:
    """``value`` with strings, lists and nesting bounded (JSON types only)."""
    if isinstance(value, str):
        return value if len(value) <= STRING_CHARS else value[:STRING_CHARS] + "…"
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= DEPTH:
        return "…"
    if isinstance(value, list):
        return [trim(item, depth + 1) for item in value[:LIST_ITEMS]] + (["…"] if len(value) > LIST_ITEMS else [])
    if isinstance(value, Mapping):
        return {str(key)[:80]: trim(item, depth + 1) for key, item in list(value.items())[:LIST_ITEMS]}
    return str(value)[:STRING_CHARS]


def project(data: Any, paths: Sequence[str]) -> dict[str, Any]:
    """The ``paths`` found in ``data``, keyed by the path as the file writes it (a missing one left out)."""
    found: dict[str, Any] = {}
    for path in paths:
        value = _walk(data, path.split("."))
        if value is not _MISSING:
            found[path] = trim(value)
    return found


def note_of(data: Mapping[str, Any]) -> str:
    """The projected data as the model reads it: compact JSON within NOTE_CHARS (the last paths
    dropped, and said so, when it is longer)."""
    kept = dict(data)
    text = json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
    while len(text) > NOTE_CHARS and kept:
        kept.pop(next(reversed(kept)))
        text = json.dumps({**kept, "_cut": "the rest was too long"}, ensure_ascii=False, separators=(",", ":"))
    return text


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "/".join(_short(item) for item in value[:5]) + ("/…" if len(value) > 5 else "")
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))[:60]
    if isinstance(value, bool):
        return "true" if value else "false"
    text = " ".join(str(value).split())
    return text if len(text) <= 60 else text[:60] + "…"


def line_of(tool: str, arguments: Mapping[str, Any], outcome: str) -> str:
    """``order_status order_id=5521: status=shipped, eta=2026-12-06``, within LINE_CHARS."""
    shown = " ".join(f"{key}={_short(value)}" for key, value in arguments.items())
    head = f"{tool} {shown}".strip()
    line = f"{head}: {outcome}"
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def summary_of(data: Mapping[str, Any]) -> str:
    """The projected values as ``key=value`` pairs (the line's outcome part)."""
    return ", ".join(f"{key}={_short(value)}" for key, value in data.items()) or "done"
