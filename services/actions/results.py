"""What a sent request gave, as the ActionOutcome the model and the memory read: the projected data
of a 2xx answer, or a short failure the model can explain (no time, refused with its HTTP status, a
broken or oversize answer, not sent), never a secret, the url or the response's raw text."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from services.actions.projection import line_of, note_of, project, summary_of
from services.actions.request import HttpResult
from services.core.actions import ActionOutcome, OutcomeKind


def _failure(result: HttpResult, service: str) -> tuple[OutcomeKind, str, str]:
    """(kind, note, the line's outcome part) of a request that gave no usable answer."""
    status = result.status
    if result.kind == "timeout":
        return "timeout", f"{service} did not answer in time", "no answer in time"
    if result.kind == "oversize":
        return "failed", f"{service} sent an answer too large to read", "answer too large"
    if result.kind == "unreachable":
        return "failed", f"{service} could not be reached", "unreachable"
    if result.kind == "refused" and status is None:
        why = f": {result.reason}" if result.reason else ""
        return "refused", f"the request to {service} was not sent{why}", "not sent"
    if status is not None and 300 <= status < 400:
        return "failed", f"{service} answered with a redirect (HTTP {status}), which is not followed", f"HTTP {status}"
    if status is not None and status >= 500:
        return "failed", f"{service} failed (HTTP {status})", f"failed (HTTP {status})"
    return "failed", f"{service} refused the request (HTTP {status})", f"refused (HTTP {status})"


_UNREADABLE = object()


def _parsed(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return _UNREADABLE


def outcome_of(
    tool: str, paths: list[str], arguments: Mapping[str, Any], result: HttpResult, *, idempotency_key: str | None
) -> ActionOutcome:
    """The outcome of one sent request of ``tool`` (``paths``: its ``result`` projection)."""
    service = f"the {tool} service"
    common: dict[str, Any] = {"status": result.status, "seconds": result.seconds, "idempotency_key": idempotency_key}
    if result.kind != "ok":
        kind, note, short = _failure(result, service)
        return ActionOutcome(kind=kind, note=note, line=line_of(tool, arguments, short), **common)
    if not paths:
        note = f"done: {service} accepted it (HTTP {result.status})"
        return ActionOutcome(kind="ok", note=note, data={}, line=line_of(tool, arguments, "done"), **common)
    data = _parsed(result.body)
    if data is _UNREADABLE:
        note = f"{service} answered with something that is not JSON: its answer cannot be read"
        return ActionOutcome(kind="failed", note=note, line=line_of(tool, arguments, "unreadable answer"), **common)
    projected = project(data, paths)
    return ActionOutcome(
        kind="ok",
        note=note_of(projected),
        data=projected,
        line=line_of(tool, arguments, summary_of(projected)),
        **common,
    )


def refusal(tool: str, arguments: Mapping[str, Any], why: str, *, kind: OutcomeKind = "refused") -> ActionOutcome:
    """A call not sent (its arguments, its address, the phone missing...): ``why`` is for the model."""
    return ActionOutcome(kind=kind, note=why, line=line_of(tool, arguments, "not sent"))
