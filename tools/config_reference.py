"""Writes docs/configuration.md from the pydantic-settings classes, so the reference cannot drift from
the code: every setting's environment name, type, default and Field description, grouped by class.
Also the checks the tests run: a description for every setting, and a line in .env.example for every
setting (``# NAME=`` counts) that shows its real default.

    .venv/bin/python -m tools.config_reference           # write docs/configuration.md
    .venv/bin/python -m tools.config_reference --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import SecretStr, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = "docs/configuration.md"
SOURCES = ("bot", "services")
"""The packages searched for settings classes (any ``class X(BaseSettings)`` in them)."""

_ENV_LINE = re.compile(r"^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$")
_COMPOSE_DEFAULT = re.compile(r"\$\{([A-Z][A-Z0-9_]*):-([^}]*)\}")


@dataclass(frozen=True, slots=True)
class Setting:
    env: str
    field: FieldInfo


def settings_classes(root: Path = ROOT) -> list[type[BaseSettings]]:
    """Every BaseSettings subclass defined in bot/ and services/, by file path and then source order.
    Found by reading the source (no module is imported just to look), then imported."""
    found: list[type[BaseSettings]] = []
    for package in SOURCES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            names = [node.name for node in tree.body if isinstance(node, ast.ClassDef) and _is_settings(node)]
            if not names:
                continue
            module = importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts))
            found += [getattr(module, name) for name in names]
    return found


def _is_settings(node: ast.ClassDef) -> bool:
    return any(
        (isinstance(base, ast.Name) and base.id == "BaseSettings")
        or (isinstance(base, ast.Attribute) and base.attr == "BaseSettings")
        for base in node.bases
    )


def settings_of(cls: type[BaseSettings]) -> list[Setting]:
    prefix = str(cls.model_config.get("env_prefix", ""))
    return [Setting((prefix + name).upper(), field) for name, field in cls.model_fields.items()]


def compose_variables(root: Path = ROOT) -> dict[str, str]:
    """Variables docker-compose.yml substitutes with a default (``${NAME:-default}``): read by compose,
    not by the bot, but set in the same .env."""
    text = (root / "docker-compose.yml").read_text(encoding="utf-8")
    return dict(_COMPOSE_DEFAULT.findall(text))


# --- rendering ------------------------------------------------------------------------------------


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, UnionType):
        rest = [arg for arg in get_args(annotation) if arg is not NoneType]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


def _bounds(field: FieldInfo) -> str:
    """The constraints of Field(gt=..., le=..., pattern=...), read from the field's metadata objects
    (annotated-types' Gt, Ge, Lt, Le and pydantic's pattern holder) by their attributes."""
    low = high = pattern = ""
    for item in field.metadata:
        if getattr(item, "gt", None) is not None:
            low = f"> {item.gt}"
        elif getattr(item, "ge", None) is not None:
            low = f"≥ {item.ge}"
        if getattr(item, "lt", None) is not None:
            high = f"< {item.lt}"
        elif getattr(item, "le", None) is not None:
            high = f"≤ {item.le}"
        if getattr(item, "pattern", None):
            pattern = f"matching `{item.pattern}`"
    if low.startswith("≥") and high.startswith("≤"):
        return f"{low[2:]} to {high[2:]}"
    return " and ".join(part for part in (low, high, pattern) if part)


def type_of(field: FieldInfo) -> str:
    annotation = _without_none(field.annotation)
    if get_origin(annotation) is Literal:
        choices = [f"`{choice}`" for choice in get_args(annotation)]
        return " or ".join(choices) if len(choices) == 2 else "one of " + ", ".join(choices)
    names = {bool: "`true` or `false`", int: "integer", float: "number", str: "string", SecretStr: "secret string"}
    name = names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    bounds = _bounds(field)
    return f"{name}, {bounds}" if bounds else name


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value)


def default_of(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    shown = _env_value(value)
    return f"`{shown}`" if shown else "empty"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _source_of(cls: type) -> str:
    return cls.__module__.replace(".", "/") + ".py"


def render(classes: Sequence[type[BaseSettings]], compose: dict[str, str]) -> str:
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `.venv/bin/python -m tools.config_reference` from the settings classes: do not",
        "     edit by hand; change the Field(description=...) in the class and regenerate. -->",
        "",
        "Every setting is an environment variable, or a `NAME=value` line in `.env` in the working",
        "directory (the environment wins). A blank value (`NAME=`) means the default. Names are not case",
        "sensitive. `.env.example` lists every setting with a comment; `./scripts/run` copies it to `.env`",
        "on the first start. Invalid values stop the start with the setting's name and the rule it broke.",
        "",
    ]
    for cls in classes:
        lines += [f"## {cls.__name__}", ""]
        doc = " ".join((cls.__doc__ or "").split())
        lines += [f"`{_source_of(cls)}`" + (f": {doc}" if doc else ""), ""]
        lines += ["| setting | type | default | description |", "| --- | --- | --- | --- |"]
        for setting in settings_of(cls):
            field = setting.field
            description = _cell(field.description or "")
            lines.append(f"| `{setting.env}` | {type_of(field)} | {default_of(field)} | {description} |")
        lines.append("")
    if compose:
        lines += [
            "## docker compose only",
            "",
            "Read by `docker-compose.yml` from the same `.env`, not by the bot.",
            "",
            "| variable | default | description |",
            "| --- | --- | --- |",
        ]
        comments = _env_comments((ROOT / ".env.example").read_text(encoding="utf-8"))
        for name, value in compose.items():
            shown = f"`{value}`" if value else "empty"
            lines.append(f"| `{name}` | {shown} | {_cell(comments.get(name, ''))} |")
        lines.append("")
    return "\n".join(lines)


def _env_comments(example: str) -> dict[str, str]:
    """The comment lines right above each ``NAME=`` line of .env.example."""
    comments: dict[str, str] = {}
    above: list[str] = []
    for line in example.splitlines():
        match = _ENV_LINE.match(line)
        if match and not match.group(1):
            comments[match.group(2)] = " ".join(above)
            above = []
        elif line.startswith("# ") and not line.startswith("# ---"):
            above.append(line[2:].strip())
        else:
            above = []
    return comments


# --- checks ---------------------------------------------------------------------------------------


def missing_descriptions(classes: Iterable[type[BaseSettings]]) -> list[str]:
    return [
        f"{setting.env} ({cls.__name__}) has no Field description"
        for cls in classes
        for setting in settings_of(cls)
        if not (setting.field.description or "").strip()
    ]


def _env_lines(example: str) -> dict[str, list[str]]:
    """Every ``NAME=value`` and ``# NAME=value`` line of a .env file: name → the values shown."""
    shown: dict[str, list[str]] = {}
    for line in example.splitlines():
        match = _ENV_LINE.match(line.strip())
        if match:
            shown.setdefault(match.group(2), []).append(_unquoted(match.group(3)))
    return shown


def _unquoted(raw: str) -> str:
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value.split(" #", 1)[0].strip()  # an unquoted value ends where a comment starts


def _disagreement(field: FieldInfo, shown: str) -> str | None:
    """Why ``shown`` is not the field's default as the settings would read it, or None."""
    default = field.get_default(call_default_factory=True)
    default_text = _env_value(default) if default is not None else ""
    if shown == "":
        # blank means "use the default": it shows the default only when that is unset or empty
        return None if default_text == "" else f"shows it blank, the default is {default_text!r}"
    try:
        value: Any = TypeAdapter(field.annotation).validate_python(shown)
    except ValidationError:
        return f"shows {shown!r}, which is not a valid value (the default is {default_text!r})"
    if isinstance(value, SecretStr) and isinstance(default, SecretStr):
        same = value.get_secret_value() == default.get_secret_value()
    else:
        same = value == default
    return None if same else f"shows {shown!r}, the default is {default_text!r}"


def env_example_problems(example: str, classes: Iterable[type[BaseSettings]], compose: dict[str, str]) -> list[str]:
    """Settings (and compose variables) .env.example lacks, or shows with a value other than the default."""
    lines = _env_lines(example)
    problems: list[str] = []
    for cls in classes:
        for setting in settings_of(cls):
            values = lines.get(setting.env)
            if not values:
                problems.append(f"{setting.env} has no line in .env.example")
                continue
            for shown in values:
                why = _disagreement(setting.field, shown)
                if why:
                    problems.append(f"{setting.env}: .env.example {why}")
    for name, default in compose.items():
        values = lines.get(name)
        if not values:
            problems.append(f"{name} has no line in .env.example")
        problems += [
            f"{name}: .env.example shows {shown!r}, docker-compose.yml's default is {default!r}"
            for shown in values or ()
            if shown != default
        ]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.config_reference", description="Write docs/configuration.md from the settings classes"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from what would be written")
    parser.add_argument("--output", type=Path, default=ROOT / OUTPUT)
    args = parser.parse_args(argv)
    page = render(settings_classes(), compose_variables())
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != page:
            print(f"{args.output} is out of date: run .venv/bin/python -m tools.config_reference", file=sys.stderr)
            return 1
        return 0
    if current != page:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(page, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
