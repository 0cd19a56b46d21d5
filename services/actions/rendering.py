"""A checked call rendered as the PreparedRequest the bot sends: ``{param}`` percent-encoded in the
path and query (``../``, ``%2F``, ``@host``, ``?``, ``#`` stay inside their segment; the rendered url
is read again and refused unless its scheme, host and port are the template's), JSON-encoded in the
body (a whole-string placeholder keeps its type), ``{customer.*}`` from the Customer, ``${ENV}``
values (read at load) in headers only, named in ``secret_headers``; Idempotency-Key on a write."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from services.actions.checks import templates
from services.actions.placeholders import Placeholder, Segment, fill, parse, placeholders
from services.actions.request import PreparedRequest
from services.actions.spec import ToolSpec
from services.actions.targets import DEFAULT_PORTS, UrlTemplate
from services.core.actions import Customer

CONFIRM_MAX = 1000
SHOWN_VALUE_MAX = 200
"""Characters of one argument shown in the text a person decides on (longer: cut, with …)."""
_BREAKS = frozenset({"Cc", "Zl", "Zp"})
"""Line breaks, tabs and other controls: a space in the decision text (no fake line can be made)."""
_HIDDEN = frozenset({"Cf", "Co", "Cs", "Cn"})
"""Invisible format characters (bidi overrides such as U+202E, zero-width ones), private, unassigned: removed."""
_PLAIN = frozenset("._-:/@+,")


class RenderRefused(Exception):
    """The call cannot be sent as rendered; the message is short, for the model, without a value."""


class NeedsPhone(RenderRefused):
    """The tool uses {customer.phone} and the customer has not shared it."""


@dataclass(frozen=True, slots=True)
class CompiledTool:
    """A tool as loaded and checked: its templates read once, its schemas built once."""

    name: str
    spec: ToolSpec
    url: UrlTemplate
    query: dict[str, list[Segment]]
    headers: dict[str, list[Segment]]
    confirm: list[Segment] | None
    schema: dict[str, Any]
    """The model's function schema (strict)."""
    checking: dict[str, Any]
    """The schema the arguments are validated against."""
    secrets: dict[str, str]
    """The ``${ENV}`` values its headers use, read at load time (never logged)."""
    needs_phone: bool


def uses_phone(spec: ToolSpec) -> bool:
    return any(
        found.kind == "customer" and found.name == "phone"
        for field, text in templates(spec)
        if field != "confirm"
        for found in placeholders(parse(text))
    )


def text_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _customer_value(name: str, customer: Customer) -> Any:
    if name == "telegram_id":
        return customer.telegram_id
    if customer.phone is None:
        raise NeedsPhone("this tool needs the customer's phone number, shared with Telegram's contact button")
    return customer.phone


def _value(found: Placeholder, args: Mapping[str, Any], customer: Customer, secrets: Mapping[str, str]) -> Any:
    if found.kind == "param":
        return args[found.name]
    if found.kind == "customer":
        return _customer_value(found.name, customer)
    return secrets[found.name]


def _encoded(segments: list[Segment], args: Mapping[str, Any], customer: Customer) -> str:
    return fill(segments, lambda found: quote(text_of(_value(found, args, customer, {})), safe=""))


def _same_target(url: str, template: UrlTemplate) -> bool:
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    except ValueError:
        return False
    if (parts.scheme, parts.hostname, port) != (template.scheme, template.host, template.port) or parts.fragment:
        return False
    return not any(unquote(segment) in (".", "..") for segment in parts.path.split("/"))


def render_url(tool: CompiledTool, args: Mapping[str, Any], customer: Customer) -> str:
    path = _encoded(tool.url.path, args, customer)
    query = [_encoded(tool.url.query, args, customer)] if tool.url.query else []
    query += [f"{quote(key, safe='')}={_encoded(segments, args, customer)}" for key, segments in tool.query.items()]
    url = tool.url.origin + path + ("?" + "&".join(query) if query else "")
    if not _same_target(url, tool.url):
        raise RenderRefused("an argument would change the address the request goes to: refused")
    return url


def _render_body(value: Any, args: Mapping[str, Any], customer: Customer) -> Any:
    if isinstance(value, str):
        segments = parse(value)
        if len(segments) == 1 and isinstance(segments[0], Placeholder):
            return _value(segments[0], args, customer, {})  # the whole string: the typed value
        return fill(segments, lambda found: text_of(_value(found, args, customer, {})))
    if isinstance(value, Mapping):
        return {key: _render_body(item, args, customer) for key, item in value.items()}
    if isinstance(value, list):
        return [_render_body(item, args, customer) for item in value]
    return value


def _render_headers(tool: CompiledTool, args: Mapping[str, Any], customer: Customer) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, segments in tool.headers.items():
        value = fill(segments, lambda found: text_of(_value(found, args, customer, tool.secrets)))
        if any(char in value for char in "\r\n\0"):
            raise RenderRefused(f"the {name} header would hold a line break: refused")
        headers[name] = value
    return headers


def render(
    tool: CompiledTool, args: Mapping[str, Any], customer: Customer, *, idempotency_key: str | None
) -> PreparedRequest:
    """The request for ``args`` (already checked) on behalf of ``customer``; RenderRefused (NeedsPhone)."""
    headers = _render_headers(tool, args, customer)
    body: bytes | None = None
    if tool.spec.body is not None:
        rendered = _render_body(tool.spec.body, args, customer)
        body = json.dumps(rendered, ensure_ascii=False, separators=(",", ":")).encode()
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/json"
    if idempotency_key is not None and tool.spec.risk in ("write", "approval"):
        headers["Idempotency-Key"] = idempotency_key
    secret = frozenset(
        name for name, segments in tool.headers.items() if any(p.kind == "env" for p in placeholders(segments))
    )
    return PreparedRequest(
        method=tool.spec.method,
        url=render_url(tool, args, customer),
        headers=headers,
        body=body,
        secret_headers=secret,
    )


def confirm_text(tool: CompiledTool, args: Mapping[str, Any]) -> str:
    """The text a person decides on: the tool's ``confirm`` filled with the arguments, or for an
    approval tool without one, its name and arguments."""
    if tool.confirm is not None:
        return fill(tool.confirm, lambda found: shown_value(args.get(found.name, "")))
    shown = ", ".join(f"{key}={shown_value(value)}" for key, value in args.items())
    return (f"Run {tool.name}" + (f" with {shown}" if shown else ""))[:CONFIRM_MAX] + "?"


def shown_value(value: Any) -> str:
    """An argument the model wrote as the decision text shows it: on one line (whitespace collapsed,
    controls, bidi overrides and other invisible characters gone), at most SHOWN_VALUE_MAX characters,
    and quoted unless it is a plain token (``5521``, ``12.5``, ``a@b.example``)."""
    kept = (" " if unicodedata.category(ch) in _BREAKS else ch for ch in text_of(value))
    text = " ".join("".join(ch for ch in kept if unicodedata.category(ch) not in _HIDDEN).split())
    if len(text) > SHOWN_VALUE_MAX:
        text = text[:SHOWN_VALUE_MAX].rstrip() + "…"
    if text and all(ch.isalnum() or ch in _PLAIN for ch in text):
        return text
    return json.dumps(text, ensure_ascii=False)
