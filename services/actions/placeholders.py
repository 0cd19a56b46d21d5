"""The placeholders of an ACTIONS_FILE template, read by a plain scanner (no regex): ``{param}`` (the
model's argument), ``{customer.telegram_id}`` / ``{customer.phone}`` (filled by code), ``${ENV}`` (a
secret from the environment); ``{{`` and ``}}`` are literal braces. Anything else in braces is a
mistake the loader reports."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

PlaceholderKind = Literal["param", "customer", "env"]
CUSTOMER_FIELDS = ("telegram_id", "phone")
"""The fields of ``{customer.<field>}``: the Customer the bot took from the update."""


@dataclass(frozen=True, slots=True)
class Placeholder:
    kind: PlaceholderKind
    name: str

    def __str__(self) -> str:
        if self.kind == "env":
            return "${" + self.name + "}"
        return "{customer." + self.name + "}" if self.kind == "customer" else "{" + self.name + "}"


Segment = str | Placeholder
"""A template read: literal text and placeholders, in order."""


class TemplateError(ValueError):
    """A template that cannot be read; the message says what is wrong and the fix."""


def is_identifier(name: str) -> bool:
    """ASCII letters, digits and ``_``, not starting with a digit (a param or variable name)."""
    return bool(name) and name.isascii() and name.replace("_", "a").isalnum() and not name[0].isdigit()


def _placeholder(inner: str, env: bool) -> Placeholder:
    if env:
        if not is_identifier(inner):
            raise TemplateError(f"${{{inner}}} is not a variable name: write ${{NAME}} (letters, digits, _)")
        return Placeholder("env", inner)
    head, dot, field = inner.partition(".")
    if dot and head == "customer":
        if field not in CUSTOMER_FIELDS:
            known = ", ".join("{customer." + name + "}" for name in CUSTOMER_FIELDS)
            raise TemplateError(f"{{{inner}}} is not known: the customer's fields are {known}")
        return Placeholder("customer", field)
    if not is_identifier(inner):
        raise TemplateError(
            f"{{{inner[:40]}}} is not a placeholder: write {{param}}, {{customer.telegram_id}}, "
            "{customer.phone} or ${ENV}; a literal brace is {{ or }}"
        )
    return Placeholder("param", inner)


def parse(template: str) -> list[Segment]:
    """The segments of ``template``; TemplateError for an unclosed brace or an unknown placeholder."""
    segments: list[Segment] = []
    text: list[str] = []
    i = 0
    while i < len(template):
        char = template[i]
        pair = template[i : i + 2]
        if pair in ("{{", "}}"):
            text.append(char)
            i += 2
            continue
        env = pair == "${"
        if char == "{" or env:
            start = i + (2 if env else 1)
            end = template.find("}", start)
            if end < 0 or "{" in template[start:end]:
                raise TemplateError("a { is not closed: write {param}, or {{ for a literal brace")
            if text:
                segments.append("".join(text))
                text = []
            segments.append(_placeholder(template[start:end], env))
            i = end + 1
            continue
        if char == "}":
            raise TemplateError("a } is not opened: write {param}, or }} for a literal brace")
        text.append(char)
        i += 1
    if text:
        segments.append("".join(text))
    return segments


def placeholders(segments: Sequence[Segment]) -> Iterator[Placeholder]:
    return (segment for segment in segments if isinstance(segment, Placeholder))


def fill(segments: Sequence[Segment], value: Callable[[Placeholder], str]) -> str:
    """The text with every placeholder replaced by ``value(placeholder)``."""
    return "".join(segment if isinstance(segment, str) else value(segment) for segment in segments)
