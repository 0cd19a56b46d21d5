"""ACTIONS_FILE read and checked as a whole: a capped read, ``yaml.safe_load`` (no anchors, no
duplicate keys), the format (spec.py) and the rules (checks.py) of every tool, and every mistake at
once as ``tool <name>: <field>: <what is wrong and the fix>`` (ActionsFileError), never an
environment variable's value. A file without mistakes becomes the Catalog."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from services.actions import checks
from services.actions.arguments import model_schema, validation_schema
from services.actions.catalog import Catalog, Sender
from services.actions.http import ActionHttp
from services.actions.placeholders import TemplateError, parse, placeholders
from services.actions.rendering import CompiledTool, uses_phone
from services.actions.request import HostRule
from services.actions.settings import read_variables
from services.actions.spec import TOP_KEYS, HostSpec, ToolSpec, tool_name_problem
from services.actions.targets import UrlTemplate, host_rule, url_template

MAX_FILE_BYTES = 256 * 1024
MAX_NESTING = 32
"""Levels of mappings and lists the file may nest (a json body template's included): the checks and
the rendering walk them, and no real tool needs more."""
_HOSTS = TypeAdapter(list[HostSpec])
_TYPE_NAMES = {"bool", "int", "float", "str"}


class ActionsFileError(Exception):
    """ACTIONS_FILE cannot be used: ``lines`` holds one line per mistake."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class _Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    """safe_load's loader refusing anchors/aliases (a few lines could expand to millions of nodes) and
    a key written twice (YAML would keep the last silently)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key[:60]!r} is written twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_file(path: Path) -> Any:
    """The file's YAML, read with a cap; ActionsFileError when it cannot be read."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ActionsFileError([f"file: {path} cannot be read ({exc.strerror or type(exc).__name__})"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ActionsFileError([f"file: {path} is over {MAX_FILE_BYTES // 1024} kB: split out what is not a tool"])
    try:
        loaded = yaml.load(raw.decode("utf-8"), Loader=_Loader)
    except UnicodeDecodeError:
        raise ActionsFileError([f"file: {path} is not UTF-8 text"]) from None
    except RecursionError:  # the YAML reader recurses per level: some hundreds of [ or { exhaust it
        raise ActionsFileError([f"file: {path} is nested too deeply (at most {MAX_NESTING} levels)"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "cannot be read"
        raise ActionsFileError([f"file: {path} is not valid YAML: {where}{problem}"]) from None
    if _nesting_over(loaded, MAX_NESTING):
        raise ActionsFileError([f"file: {path} is nested too deeply (at most {MAX_NESTING} levels)"])
    return loaded


def _nesting_over(raw: Any, limit: int) -> bool:
    """Whether mappings and lists nest more than ``limit`` levels (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
    return False


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc if str(part) not in _TYPE_NAMES) or "(the tool)"


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "is not a known key: remove it or fix its spelling (docs/actions.md lists every key)"
    if kind == "missing":
        return "is required"
    if kind in ("string_type", "dict_type", "list_type", "bool_type", "int_type", "float_type"):
        return f"has the wrong type: {error['msg'][:1].lower()}{error['msg'][1:]}"
    return f"{error['msg'][:1].lower()}{error['msg'][1:]}"


def _pydantic_lines(prefix: str, exc: ValidationError) -> list[str]:
    found: dict[str, str] = {}
    for error in exc.errors(include_input=False, include_url=False):
        found.setdefault(_field(error["loc"]), _message(error))  # a union's members: its first line
    return [f"{prefix}{field}: {message}" for field, message in found.items()]


def _hosts(raw: Any) -> tuple[list[HostRule], list[str]]:
    try:
        entries = _HOSTS.validate_python(raw)
    except ValidationError as exc:
        return [], _pydantic_lines("hosts.", exc)
    rules: list[HostRule] = []
    lines: list[str] = []
    for index, entry in enumerate(entries):
        rule = host_rule(entry)
        if isinstance(rule, str):
            lines.append(f"hosts.{index}: {rule}")
        else:
            rules.append(rule)
    return rules, lines


def _tool_problems(
    spec: ToolSpec, rules: list[HostRule], variables: Mapping[str, str], operator_chat: bool
) -> Iterator[checks.Problem]:
    for key, param in spec.params.items():
        yield from checks.param_problems(key, param)
    yield from checks.risk_problems(spec, operator_chat)
    yield from checks.placeholder_problems(spec, variables)
    yield from checks.header_problems(spec)
    yield from checks.identity_slot_problems(spec)
    yield from checks.body_key_problems(spec.body)
    yield from checks.result_problems(spec)
    url = url_template(spec.url, rules)
    if isinstance(url, str):
        yield "url", url


def compile_tool(name: str, spec: ToolSpec, url: UrlTemplate, variables: Mapping[str, str]) -> CompiledTool:
    """A tool whose checks passed, its templates read once."""
    headers = {key: parse(value) for key, value in spec.headers.items()}
    secrets = {
        found.name: variables[found.name]
        for segments in headers.values()
        for found in placeholders(segments)
        if found.kind == "env"
    }
    return CompiledTool(
        name=name,
        spec=spec,
        url=url,
        query={key: parse(value) for key, value in spec.query.items()},
        headers=headers,
        confirm=parse(spec.confirm) if spec.confirm is not None else None,
        schema=model_schema(name, spec),
        checking=validation_schema(spec),
        secrets=secrets,
        needs_phone=uses_phone(spec),
    )


def _one_tool(
    name: Any, raw: Any, rules: list[HostRule], variables: Mapping[str, str], operator_chat: bool
) -> CompiledTool | list[str]:
    prefix = f"tool {str(name)[:64]}: "
    problem = tool_name_problem(name) if isinstance(name, str) else "the name must be text"
    lines = [f"{prefix}name: {problem}"] if problem else []
    try:
        spec = ToolSpec.model_validate(raw)
    except ValidationError as exc:
        return lines + _pydantic_lines(prefix, exc) + _risk_lines(prefix, raw, operator_chat)
    lines += [f"{prefix}{field}: {what}" for field, what in _tool_problems(spec, rules, variables, operator_chat)]
    if lines:
        return lines
    url = url_template(spec.url, rules)
    assert not isinstance(url, str)
    return compile_tool(name, spec, url, variables)


def _risk_lines(prefix: str, raw: Any, operator_chat: bool) -> list[str]:
    """The risk rules of a tool whose format is wrong elsewhere (so every mistake shows at once)."""
    if not isinstance(raw, dict):
        return []
    lines = []
    if raw.get("risk") == "write" and "confirm" not in raw:
        lines.append(f"{prefix}confirm: a write tool needs the text the customer confirms")
    if raw.get("risk") == "approval" and not operator_chat:
        lines.append(f"{prefix}risk: approval needs the operators' group: set OPERATOR_CHAT_ID, or use risk: write")
    return lines


def _top_lines(raw: Any) -> list[str]:
    if not isinstance(raw, dict):
        return ["file: the file must be a mapping with hosts: and tools: (see docs/actions.md)"]
    lines = [f"{key}: is not a known key: the file has only hosts: and tools:" for key in raw if key not in TOP_KEYS]
    if not isinstance(raw.get("tools"), dict) or not raw["tools"]:
        lines.append("tools: is required: a mapping of tool names to tools (see docs/actions.md)")
    if not raw.get("hosts"):
        lines.append("hosts: is required: the list of every host a tool may call")
    return lines


def load_tools(
    raw: Any, *, variables: Mapping[str, str], operator_chat_configured: bool
) -> tuple[list[CompiledTool], list[HostRule]]:
    """The file's tools and hosts; ActionsFileError with every mistake."""
    lines = _top_lines(raw)
    if not isinstance(raw, dict):
        raise ActionsFileError(lines)
    rules, host_lines = _hosts(raw.get("hosts") or [])
    lines += host_lines
    tools: list[CompiledTool] = []
    raw_tools = raw.get("tools")
    for name, spec in (raw_tools if isinstance(raw_tools, dict) else {}).items():
        found = _one_tool(name, spec, rules, variables, operator_chat_configured)
        if isinstance(found, list):
            lines += found
        else:
            tools.append(found)
    if lines:
        raise ActionsFileError(lines)
    return tools, rules


def http_sender(hosts: list[HostRule], *, timeout: float, max_bytes: int) -> Sender:
    """The sender of the file's requests: ActionHttp, made when the first call is sent."""
    return ActionHttp(hosts, total_timeout=timeout, max_bytes=max_bytes)


def variable_names(raw: Any) -> set[str]:
    """Every ``${NAME}`` the file writes (where it may not, too: the check says so)."""
    if isinstance(raw, str):
        try:
            return {found.name for found in placeholders(parse(raw)) if found.kind == "env"}
        except TemplateError:
            return set()
    if isinstance(raw, dict):
        return set().union(*(variable_names(item) for item in raw.values()))
    if isinstance(raw, list):
        return set().union(*(variable_names(item) for item in raw))
    return set()


def load_catalog(
    path: str | Path,
    *,
    variables: Mapping[str, str] | None = None,
    operator_chat_configured: bool,
    timeout: float,
    max_bytes: int,
    audit_key: bytes | None = None,
) -> Catalog:
    """ACTIONS_FILE as a Catalog; ActionsFileError listing every mistake. ``variables``: the values
    of its ``${NAME}`` secrets (None: read as settings are, from the environment and .env);
    ``audit_key``: the key of the audit line's argument digests (catalog.audit_key)."""
    raw = read_file(Path(path))
    if variables is None:
        variables = read_variables(variable_names(raw))
    tools, hosts = load_tools(raw, variables=variables, operator_chat_configured=operator_chat_configured)
    return Catalog(tools, hosts, lambda: http_sender(hosts, timeout=timeout, max_bytes=max_bytes), audit_key=audit_key)
