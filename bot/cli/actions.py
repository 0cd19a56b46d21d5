"""The operator's tools (ACTIONS_FILE), from the same code the bot runs them with.

python -m bot actions check [PATH]     ok: N tools, or one line per mistake (exit 2)
python -m bot actions list             each tool: risk, method, host, who decides
python -m bot actions test TOOL --param order_id=5521 --customer-id 7 [--phone P] [--yes]
                                       one call as the bot makes it; a write or approval tool's
                                       request is sent only with --yes (its Idempotency-Key printed)
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any, TextIO

from services.actions.catalog import Catalog
from services.actions.loading import ActionsFileError, load_catalog
from services.actions.rendering import CompiledTool
from services.core.actions import Customer, idempotency_key


def open_catalog(
    path: str,
    *,
    operator_chat_configured: bool,
    timeout: float,
    max_bytes: int,
    audit_key: bytes | None = None,
    err: TextIO | None = None,
) -> Catalog | None:
    """The catalog, or None after writing every mistake to ``err`` (stderr)."""
    err = err or sys.stderr
    try:
        return load_catalog(
            path,
            operator_chat_configured=operator_chat_configured,
            timeout=timeout,
            max_bytes=max_bytes,
            audit_key=audit_key,
        )
    except ActionsFileError as exc:
        for line in exc.lines:
            err.write(f"{line}\n")
        err.write(f"{Path(path)}: {len(exc.lines)} mistake(s); docs/actions.md explains each key\n")
        return None


def check(catalog: Catalog, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    out.write(f"ok: {len(catalog.names())} tools\n")
    return 0


def _who_decides(tool: CompiledTool) -> str:
    if tool.spec.risk == "write":
        return "the customer confirms: " + (tool.spec.confirm or "")
    if tool.spec.risk == "approval":
        return "an operator approves" + (f": {tool.spec.confirm}" if tool.spec.confirm else "")
    return "runs at once"


def show(catalog: Catalog, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    for tool in catalog.tools:
        phone = "\tneeds the phone" if tool.needs_phone else ""
        out.write(
            f"{tool.name}\t{tool.spec.risk}\t{tool.spec.method}\t{tool.url.origin}\t{_who_decides(tool)}{phone}\n"
        )
    out.write(f"{len(catalog.names())} tools, hosts: {', '.join(rule.host for rule in catalog.hosts)}\n")
    return 0


def _typed(kind: str, text: str) -> Any:
    if kind == "integer":
        return int(text) if text.lstrip("-").isdigit() else text
    if kind == "number":
        try:
            return float(text)
        except ValueError:
            return text
    if kind == "boolean":
        return {"true": True, "false": False}.get(text.lower(), text)
    return text


def arguments_json(tool: CompiledTool, params: list[str]) -> str:
    """``--param NAME=VALUE`` as the model would write them (values typed by the parameter's type)."""
    found: dict[str, Any] = {}
    for param in params:
        name, _, value = param.partition("=")
        spec = tool.spec.params.get(name)
        found[name] = _typed(spec.type, value) if spec is not None else value
    return json.dumps(found)


async def test(
    catalog: Catalog,
    name: str,
    params: list[str],
    customer: Customer,
    *,
    send: bool,
    key: str | None = None,
    out: TextIO | None = None,
) -> int:
    """One call as the bot makes it: checked, rendered, sent, projected. 0 when the answer was ok."""
    out = out or sys.stdout
    tool = next((tool for tool in catalog.tools if tool.name == name), None)
    if tool is None:
        out.write(f"no tool {name!r}: the tools are {', '.join(catalog.names())}\n")
        return 2
    checked = catalog.check(name, arguments_json(tool, params))
    if isinstance(checked, str):
        out.write(f"the model's call would be {checked}\n")
        return 2
    writes = tool.spec.risk != "read"
    if writes:
        key = key or idempotency_key(customer.telegram_id, f"cli-{uuid.uuid4().hex}", 0, name)
        out.write(f"{_who_decides(tool)}\n{catalog.prompt(name, checked)}\nIdempotency-Key: {key}\n")
        if not send:
            out.write("not sent: add --yes to send it (--idempotency-key KEY repeats a call the API deduplicates)\n")
            return 1
    try:
        outcome = await catalog.run(name, checked, customer, idempotency_key=key if writes else None)
    finally:
        await catalog.close()
    status = outcome.status if outcome.status is not None else "-"
    out.write(f"{outcome.kind} (HTTP {status}, {outcome.seconds * 1000:.0f} ms)\nthe model reads: {outcome.note}\n")
    out.write(f"remembered as: {outcome.line}\n")
    return 0 if outcome.kind == "ok" else 1
