"""The rules a tool must meet beyond the format, each mistake as (field, what is wrong and the fix):
parameters (identity names refused, keywords fitting the type, patterns RE2 compiles), risk
(a write needs ``confirm``, an approval the operators' group), and every placeholder declared,
where it may stand (``${ENV}`` in headers only, set in the environment)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from services.actions.arguments import compile_pattern
from services.actions.placeholders import Placeholder, TemplateError, is_identifier, parse, placeholders
from services.actions.spec import PARAM_NAME_MAX, ParamSpec, ToolSpec, is_identity_name

Problem = tuple[str, str]
"""(field, what is wrong and the fix)."""
RESERVED_HEADERS = frozenset({"idempotency-key", "host", "content-length", "transfer-encoding", "connection"})
HEADER_NAME_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}


def _enum_problem(param: ParamSpec) -> str | None:
    for value in param.enum or ():
        fits = isinstance(value, _TYPES[param.type]) and (param.type == "boolean" or not isinstance(value, bool))
        if not fits:
            return f"the value {value!r} is not of type {param.type}: quote it or change the type"
    return None


def _keyword_problems(param: ParamSpec) -> Iterator[str]:
    if param.type != "string" and (param.pattern or param.min_length is not None or param.max_length is not None):
        yield "pattern, minLength and maxLength are for type string: remove them or change the type"
    if param.type not in ("integer", "number") and (param.minimum is not None or param.maximum is not None):
        yield "minimum and maximum are for type integer or number: remove them or change the type"
    if param.min_length is not None and param.max_length is not None and param.min_length > param.max_length:
        yield "minLength is above maxLength: swap them"
    if param.minimum is not None and param.maximum is not None and param.minimum > param.maximum:
        yield "minimum is above maximum: swap them"
    if (problem := _enum_problem(param)) is not None:
        yield problem


def param_problems(name: str, param: ParamSpec) -> Iterator[Problem]:
    field = f"params.{name}"
    if not is_identifier(name) or len(name) > PARAM_NAME_MAX:
        yield field, "the name must be 1-64 letters, digits or _ (not starting with a digit): rename it"
    if is_identity_name(name):
        yield (
            field,
            (
                "a parameter may not name the customer (the model would choose whose data is read): remove it and "
                "use {customer.telegram_id} or {customer.phone}, filled by the bot"
            ),
        )
    for problem in _keyword_problems(param):
        yield field, problem
    if param.pattern is not None:
        try:
            compile_pattern(param.pattern)
        except Exception as exc:  # re2.error: RE2 has no backreferences or lookaround
            detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            yield f"{field}.pattern", f"RE2 cannot compile it ({detail}): no backreferences or lookaround"


def risk_problems(tool: ToolSpec, operator_chat_configured: bool) -> Iterator[Problem]:
    if tool.risk == "write" and tool.confirm is None:
        yield "confirm", "a write tool needs the text the customer confirms, e.g. confirm: Cancel order {order_id}?"
    if tool.risk == "approval" and not operator_chat_configured:
        yield "risk", "approval needs the operators' group: set OPERATOR_CHAT_ID, or use risk: write"
    if tool.body is not None and tool.method == "GET":
        yield "json", "a GET request has no body: use query, or method: POST"


def _body_strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(field, text) of every string of the body template (its keys: ``body_key_problems``)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _body_strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _body_strings(item, f"{path}.{index}")


def templates(tool: ToolSpec) -> Iterator[tuple[str, str]]:
    """(field, template) of every text a placeholder may stand in, ``confirm`` included."""
    yield "url", tool.url
    yield from ((f"query.{key}", value) for key, value in tool.query.items())
    yield from ((f"headers.{key}", value) for key, value in tool.headers.items())
    yield from _body_strings(tool.body, "json")
    if tool.confirm is not None:
        yield "confirm", tool.confirm


def _placeholder_problem(field: str, found: Placeholder, tool: ToolSpec, variables: Mapping[str, str]) -> str | None:
    if found.kind == "param" and found.name not in tool.params:
        return f"{found} is not a declared parameter: add it to params or fix the name"
    if found.kind == "env":
        if not field.startswith("headers."):
            return f"{found}: a secret goes in headers only (never in the url, the query or the body)"
        value = variables.get(found.name)
        if not value:
            return f"the environment variable {found.name} is not set: set it (its value is never shown)"
        if any(char in value for char in "\r\n\0"):
            return f"the environment variable {found.name} holds a line break: remove it"
    if found.kind != "param" and field == "confirm":
        return f"{found}: the confirm text may hold only the tool's parameters"
    return None


def placeholder_problems(tool: ToolSpec, variables: Mapping[str, str]) -> Iterator[Problem]:
    used: set[str] = set()
    for field, text in templates(tool):
        try:
            segments = parse(text)
        except TemplateError as exc:
            yield field, str(exc)
            continue
        for found in segments:
            if isinstance(found, Placeholder) and (problem := _placeholder_problem(field, found, tool, variables)):
                yield field, problem
            elif isinstance(found, Placeholder) and found.kind == "param" and field != "confirm":
                used.add(found.name)
    for name in tool.params:
        if name not in used:
            yield f"params.{name}", "is never used in the request: use {" + name + "} in url, query, headers or json"


def body_key_problems(value: Any, path: str = "json") -> Iterator[Problem]:
    """Keys of the body are fixed text: no placeholder (and no brace) in them."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or "{" in key or "}" in key or "$" in key:
                yield f"{path}.{key}", "a key of the body is fixed text: no placeholder, braces or $ in it"
            yield from body_key_problems(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from body_key_problems(item, f"{path}.{index}")


_IDENTITY_WORDS = ("customer", "telegram", "userid", "chatid", "phone", "email")


def _slots(tool: ToolSpec) -> Iterator[tuple[str, tuple[str, ...], Any]]:
    """(field, the names on its path, value) of every value the request names: query, headers, and
    each value of the body with every key above it (``json.customer.id``: customer, id)."""
    yield from ((f"query.{key}", (key,), value) for key, value in tool.query.items())
    yield from ((f"headers.{key}", (key,), value) for key, value in tool.headers.items())
    stack: list[tuple[str, tuple[str, ...], Any]] = [("json", (), tool.body)]
    while stack:
        path, names, value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((f"{path}.{key}", (*names, str(key)), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((f"{path}.{index}", names, item) for index, item in enumerate(value))
        else:
            yield path, names, value


def _names_identity(name: str) -> bool:
    plain = name.lower().replace("_", "").replace("-", "")
    return is_identity_name(name) or any(word in plain for word in _IDENTITY_WORDS)


def identity_slot_problems(tool: ToolSpec) -> Iterator[Problem]:
    """A place named like the customer's identity (``customer_id``, ``X-Customer-Telegram-Id``, any
    key of the body under ``customer``...) is filled by the bot: a model argument there would let the
    model choose whose data is read."""
    for field, names, value in _slots(tool):
        if not isinstance(value, str) or not any(_names_identity(name) for name in names):
            continue
        try:
            found = list(placeholders(parse(value)))
        except TemplateError:
            continue  # reported by placeholder_problems
        if any(item.kind == "param" for item in found):
            yield field, "names the customer: fill it with {customer.telegram_id} or {customer.phone}, not an argument"


def header_problems(tool: ToolSpec) -> Iterator[Problem]:
    for name in tool.headers:
        if not name or not set(name) <= HEADER_NAME_CHARS:
            yield f"headers.{name}", "is not a header name: letters, digits and - only"
        elif name.lower() in RESERVED_HEADERS:
            yield f"headers.{name}", "is set by the bot (Idempotency-Key for writes): remove it"


def result_problems(tool: ToolSpec) -> Iterator[Problem]:
    for path in tool.result:
        if not path or any(not part for part in path.split(".")):
            yield "result", f"{path!r} is not a path: write field names joined by dots, * for every item of a list"
