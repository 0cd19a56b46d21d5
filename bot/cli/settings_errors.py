"""Settings errors as an operator reads them: one line per mistake, naming the environment variable and
the fix, every settings group checked (not only the first that fails), exit code 2.

Pydantic's own text is never shown: its ``input_value`` carries what was read (a model validator's input
is the whole environment and ``.env``: the bot token, the API key, any password), so only the structured
errors are used, without their input."""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings

from bot.settings import Settings

PROBLEMS = {
    "int_parsing": "is not a whole number",
    "int_type": "is not a whole number",
    "int_from_float": "is not a whole number",
    "float_parsing": "is not a number",
    "float_type": "is not a number",
    "bool_parsing": "is not true or false",
    "bool_type": "is not true or false",
    "missing": "is required",
}
BOUNDS = {
    "greater_than": ("gt", "must be greater than"),
    "greater_than_equal": ("ge", "must be at least"),
    "less_than": ("lt", "must be below"),
    "less_than_equal": ("le", "must be at most"),
}


_FIELD = re.compile(r'field "(\w+)"')


class SettingsError(Exception):
    """The settings cannot be used; ``lines`` holds one line per mistake, none with a value read."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def load_settings() -> Settings:
    """Every settings group read from the environment / .env; SettingsError listing every mistake in
    every group (each group validates on its own, so one group's error hides no other's)."""
    groups: dict[str, Any] = {}
    lines: list[str] = []
    for group in dataclasses.fields(Settings):
        factory = group.default_factory
        assert callable(factory)
        try:
            groups[group.name] = factory()
        except ValidationError as exc:
            lines += describe(exc, factory if isinstance(factory, type) else None)
        except ValueError as exc:  # pydantic-settings' own SettingsError: a list or dict setting not JSON
            lines.append(unreadable(exc))
    if lines:
        raise SettingsError(lines)
    return Settings(**groups)


def load_settings_or_exit() -> Settings:
    """``load_settings`` for the entry point: on a mistake, its lines on stderr and exit code 2."""
    try:
        return load_settings()
    except SettingsError as exc:
        for line in exc.lines:
            print(f"cannot start: {line}", file=sys.stderr)
        print("cannot start: fix the setting(s) above in .env or the environment (see .env.example)", file=sys.stderr)
        raise SystemExit(2) from None


def describe(exc: ValidationError, group: type | None = None) -> list[str]:
    """One line per error of ``exc``, read from its structured errors without their input."""
    lines: list[str] = []
    for error in exc.errors(include_input=False, include_url=False):
        if not error["loc"]:  # a model validator: its message names the variables and the fix, one a line
            lines += [line for line in _own_message(error["msg"]).splitlines() if line.strip()]
            continue
        field = str(error["loc"][0])
        lines.append(f"{field.upper()} {_problem(error)}{_fix(group, field, error['type'])}")
    return lines


def unreadable(exc: ValueError) -> str:
    """The line for a value pydantic-settings could not decode (its message names the field, not the value)."""
    found = _FIELD.search(str(exc))
    name = found.group(1).upper() if found else "a setting"
    return f'{name} could not be read: a list or mapping setting is written as JSON, e.g. ["a", "b"]'


def _own_message(msg: str) -> str:
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _problem(error: Any) -> str:
    kind: str = error["type"]
    context: dict[str, Any] = error.get("ctx") or {}
    if kind in PROBLEMS:
        return PROBLEMS[kind]
    if kind in BOUNDS:
        key, words = BOUNDS[kind]
        return f"{words} {context.get(key)}"
    if kind == "literal_error":
        return f"must be one of {context.get('expected')}"
    if kind == "string_pattern_mismatch":
        return f"must match the pattern {context.get('pattern')}"
    message = _own_message(str(error["msg"]))
    return message if kind == "value_error" else f"is not valid: {message[:1].lower()}{message[1:]}"


def _fix(group: type | None, field: str, kind: str) -> str:
    """The way out: the default, when there is one to fall back on (never for a secret)."""
    if kind == "value_error" or group is None or not issubclass(group, BaseSettings):
        return ""
    info = group.model_fields.get(field)
    if info is None or info.is_required() or isinstance(info.default, SecretStr):
        return ""
    if info.default is None:
        return f"; fix it, or remove {field.upper()} to leave it unset"
    default = str(info.default).lower() if isinstance(info.default, bool) else info.default
    return f"; fix it, or remove {field.upper()} for the default ({default})"
