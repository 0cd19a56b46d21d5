"""Secrets never reach a log line: every formatted line (message, exception text, JSON) is scrubbed of
the values of the secret settings (the bot token and its secret half, the API key, the webhook secret,
the Redis URL and any password inside a configured URL, the ``${NAME}`` values ACTIONS_FILE sends in
headers). A second guard: no code path should log them
in the first place, but a library's exception text (a request URL holds the bot token) is not ours."""

from __future__ import annotations

import dataclasses
import logging
import sys
import traceback
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

from pydantic import SecretStr

from bot.settings import Settings

REDACTED = "[redacted]"
SHORTEST = 4
"""Shorter values are not scrubbed (a 3-character key would blank every word holding it)."""


def secret_values(settings: Settings) -> list[str]:
    """The values to scrub, longest first (a value inside another is scrubbed after it)."""
    found: set[str] = set()
    for group in dataclasses.fields(settings):
        values = getattr(settings, group.name)
        for name in type(values).model_fields:
            value = getattr(values, name)
            if isinstance(value, SecretStr):
                found.update(_pieces(value.get_secret_value()))
            elif isinstance(value, str) and "@" in value:  # a URL with credentials
                found.update(_pieces(value))
    found.update(action_secrets(settings))
    return sorted((value for value in found if len(value) >= SHORTEST), key=len, reverse=True)


def action_secrets(settings: Settings) -> set[str]:
    """The values of the ``${NAME}`` variables ACTIONS_FILE names (none when it is unset or unreadable:
    the start is refused then anyway)."""
    path = settings.actions.actions_file
    if not path:
        return set()
    from services.actions.loading import ActionsFileError, read_file, variable_names  # YAML: only with actions
    from services.actions.settings import read_variables

    try:
        raw = read_file(Path(path))
    except ActionsFileError:
        return set()
    return {value.strip() for value in read_variables(variable_names(raw)).values()}


def _pieces(raw: str) -> set[str]:
    """``raw`` itself, a token's part after the colon, a URL's password and user:password."""
    raw = raw.strip()
    pieces = {raw}
    if ":" in raw and raw.split(":", 1)[0].isdigit():
        pieces.add(raw.split(":", 1)[1])
    try:
        parts = urlsplit(raw)
        password = parts.password
    except ValueError:
        return pieces
    if password:
        pieces |= {password, f"{parts.username or ''}:{password}"}
    return pieces


class RedactingFormatter(logging.Formatter):
    """Formats with ``inner``, then replaces every secret value in the whole line."""

    def __init__(self, inner: logging.Formatter, values: list[str]) -> None:
        super().__init__()
        self.inner = inner
        self.values = values

    def format(self, record: logging.LogRecord) -> str:
        return scrub(self.inner.format(record), self.values)


def scrub(text: str, values: list[str]) -> str:
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redact_secrets(settings: Settings) -> None:
    """Wrap the formatter of every root handler (``setup_logging`` installed them) in a RedactingFormatter,
    and scrub the traceback of an exception nothing caught the same way."""
    values = secret_values(settings)
    for handler in logging.getLogger().handlers:
        inner = handler.formatter or logging.Formatter()
        if not isinstance(inner, RedactingFormatter):
            handler.setFormatter(RedactingFormatter(inner, values))

    def excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        sys.stderr.write(scrub("".join(traceback.format_exception(kind, exc, tb)), values))

    sys.excepthook = excepthook
