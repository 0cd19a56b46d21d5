"""A tool's arguments: the strict function schema the model gets (built once, in the file's order,
byte-identical every turn) and the check of what the model wrote (capped JSON, then JSON Schema
Draft 2020-12 whose ``pattern`` runs on RE2: linear time, Python's ``re`` never sees an operator's
pattern). A refusal is a short reason for the model, never the value it wrote."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators

from services.actions.spec import DEFAULT_MAX_LENGTH, ParamSpec, ToolSpec

MAX_ARGUMENT_BYTES = 8192
"""The longest arguments JSON a call may carry; a longer one is refused before it is parsed."""
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> Any:
    """The RE2 program of an operator's pattern (re2.error when RE2 cannot compile it)."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _re2_pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and compile_pattern(pattern).search(instance) is None:
        yield ValidationError("does not match the pattern")


RE2Validator = validators.extend(Draft202012Validator, {"pattern": _re2_pattern})
"""Draft 2020-12 with ``pattern`` on RE2 (jsonschema's public ``validators.extend``)."""


def _model_property(param: ParamSpec) -> dict[str, Any]:
    """What the model is told of one parameter: only the keywords strict mode accepts (lengths go in
    the description; they are enforced here)."""
    prop: dict[str, Any] = {"type": param.type}
    description = param.description or ""
    if param.min_length is not None or param.max_length is not None:
        low, high = param.min_length or 0, param.max_length or DEFAULT_MAX_LENGTH
        description = f"{description} ({low}-{high} characters)".strip()
    if description:
        prop["description"] = description
    if param.enum is not None:
        prop["enum"] = list(param.enum)
    if param.pattern is not None:
        prop["pattern"] = param.pattern
    if param.minimum is not None:
        prop["minimum"] = param.minimum
    if param.maximum is not None:
        prop["maximum"] = param.maximum
    return prop


def model_schema(name: str, tool: ToolSpec) -> dict[str, Any]:
    """The Chat Completions ``tools`` entry, strict: every parameter required, no other allowed."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": tool.description,
            "parameters": {
                "type": "object",
                "properties": {key: _model_property(param) for key, param in tool.params.items()},
                "required": list(tool.params),
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


def validation_schema(tool: ToolSpec) -> dict[str, Any]:
    """The schema the arguments are checked against: the model's, plus the lengths (a default cap)."""
    properties: dict[str, Any] = {}
    for key, param in tool.params.items():
        prop = _model_property(param)
        prop.pop("description", None)
        if param.type == "string":
            prop["maxLength"] = param.max_length or DEFAULT_MAX_LENGTH
            if param.min_length is not None:
                prop["minLength"] = param.min_length
        properties[key] = prop
    return {"type": "object", "properties": properties, "required": list(tool.params), "additionalProperties": False}


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _reason(error: ValidationError, schema: Mapping[str, Any]) -> str:
    """One short line: which argument and what is wrong, never its value."""
    where = ".".join(str(part) for part in error.absolute_path) or "the arguments"
    keyword = str(error.validator)
    if keyword == "additionalProperties":
        extra = sorted(set(error.instance) - set(schema.get("properties", {})))
        return f"unknown argument(s) {', '.join(extra)[:200]}: use only {', '.join(schema['properties']) or 'none'}"
    if keyword == "required":
        return f"missing argument: {str(error.message).split(' ')[0][:80]}"
    if keyword in ("maxLength", "minLength", "minimum", "maximum"):
        return f"{where}: out of bounds ({keyword} {error.validator_value})"
    if keyword == "pattern":
        return f"{where}: does not have the expected form ({error.validator_value})"[:300]
    if keyword == "enum":
        return f"{where}: must be one of {json.dumps(error.validator_value, ensure_ascii=False)}"[:300]
    if keyword == "type":
        return f"{where}: must be of type {error.validator_value}"
    return f"{where}: invalid ({keyword})"


def validate(schema: Mapping[str, Any], arguments: Any) -> dict[str, Any] | str:
    """``arguments`` checked against ``schema`` (integers written as 5.0 become 5), or the refusal."""
    validator = RE2Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(e.absolute_path), str(e.validator)))
    if errors:
        return "refused: " + "; ".join(_reason(error, schema) for error in errors[:3])
    assert isinstance(arguments, dict)
    properties = schema.get("properties", {})
    return {
        key: int(value) if properties.get(key, {}).get("type") == "integer" and isinstance(value, float) else value
        for key, value in arguments.items()
    }


def check(schema: Mapping[str, Any], text: str) -> dict[str, Any] | str:
    """The model's arguments JSON (``text``) parsed and validated, or why the call is refused."""
    if len(text.encode("utf-8", "replace")) > MAX_ARGUMENT_BYTES:
        return f"refused: the arguments are longer than {MAX_ARGUMENT_BYTES} bytes"
    try:
        arguments = json.loads(text or "{}", parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return "refused: the arguments are not a JSON object"
    if not isinstance(arguments, dict):
        return "refused: the arguments are not a JSON object"
    if any(isinstance(value, float) and not math.isfinite(value) for value in arguments.values()):
        return "refused: a number is not finite"
    return validate(schema, arguments)
