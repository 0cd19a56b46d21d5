"""``Catalog``: the operator's tools (ports.ActionTools), loaded once. It gives the model its schemas,
checks a call, renders it and sends it through the sender (ActionHttp), and turns what came back
into an ActionOutcome; it never raises for a failure of the operator's API. One audit line per call
(logger ``services.actions.audit``): the tool, a keyed digest of the arguments, the outcome, the
status, the time and the idempotency key, never an argument's or a secret's value."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from services.actions.arguments import check, validate
from services.actions.placeholders import placeholders
from services.actions.rendering import CompiledTool, NeedsPhone, RenderRefused, confirm_text, render
from services.actions.request import HostRule, HttpResult, PreparedRequest
from services.actions.results import outcome_of, refusal
from services.core.actions import ActionOutcome, Customer, Risk

audit = logging.getLogger("services.actions.audit")
log = logging.getLogger(__name__)


class Sender(Protocol):
    """What sends a PreparedRequest (services/actions/http.py's ActionHttp)."""

    async def send(self, request: PreparedRequest) -> HttpResult: ...

    async def close(self) -> None: ...


def digest(arguments: Mapping[str, Any], key: bytes) -> str:
    """12 hex characters of the HMAC-SHA256 of the canonical arguments JSON: which call, not what it
    said. Keyed: an order number (a few digits) cannot be found by hashing every candidate."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()[:12]


def audit_key(secret: str) -> bytes | None:
    """The audit digests' key, derived from a secret the deployment already has (the bot token: the same
    in every worker, never in a log); None for an empty one (the Catalog then makes a key per process)."""
    return hashlib.sha256(b"actions-audit\0" + secret.encode()).digest() if secret else None


class Catalog:
    """The tools of one ACTIONS_FILE, in the file's order (``services.ports.actions.ActionTools``)."""

    def __init__(
        self,
        tools: Sequence[CompiledTool],
        hosts: Sequence[HostRule],
        sender: Callable[[], Sender],
        *,
        audit_key: bytes | None = None,
    ) -> None:
        self._audit_key = audit_key or os.urandom(32)
        """The key of the audit line's argument digests (``audit_key``); random: comparable in this process only."""
        self._tools = {tool.name: tool for tool in tools}
        self.hosts = tuple(hosts)
        self._schemas = [tool.schema for tool in tools]
        self._make_sender = sender
        self._sender: Sender | None = None

    @property
    def tools(self) -> list[CompiledTool]:
        return list(self._tools.values())

    def schemas(self) -> Sequence[dict[str, Any]]:
        return copy.deepcopy(self._schemas)  # built once; a copy, so no caller can change the next turn's

    def names(self) -> Sequence[str]:
        return list(self._tools)

    def risk(self, tool: str) -> Risk:
        return self._tools[tool].spec.risk

    def needs_phone(self, tool: str) -> bool:
        return self._tools[tool].needs_phone

    def check(self, tool: str, arguments: str) -> dict[str, Any] | str:
        found = self._tools.get(tool)
        if found is None:
            return f"refused: there is no tool {tool[:64]!r}; the tools are {', '.join(self._tools)}"
        return check(found.checking, arguments)

    def prompt(self, tool: str, arguments: dict[str, Any]) -> str:
        return confirm_text(self._tools[tool], arguments)

    async def run(
        self, tool: str, arguments: dict[str, Any], customer: Customer, *, idempotency_key: str | None
    ) -> ActionOutcome:
        started = time.monotonic()
        outcome = await self._outcome(tool, arguments, customer, idempotency_key)
        self._audit(tool, arguments, outcome, time.monotonic() - started, idempotency_key)
        return outcome

    async def close(self) -> None:
        if self._sender is not None:
            await self._sender.close()
            self._sender = None

    async def _outcome(
        self, tool: str, arguments: dict[str, Any], customer: Customer, key: str | None
    ) -> ActionOutcome:
        found = self._tools.get(tool)
        if found is None:
            return refusal(tool[:64], {}, f"refused: there is no tool {tool[:64]!r}")
        checked = validate(found.checking, arguments)
        if isinstance(checked, str):
            return refusal(tool, {}, checked)
        try:
            request = render(found, checked, customer, idempotency_key=key)
        except NeedsPhone as exc:
            return refusal(tool, checked, str(exc), kind="needs_contact")
        except RenderRefused as exc:
            return refusal(tool, checked, str(exc))
        result = await self._send(request)
        if result.status in (401, 403):
            self._credentials_refused(found, result.status)
        return outcome_of(tool, found.spec.result, checked, result, idempotency_key=key)

    async def _send(self, request: PreparedRequest) -> HttpResult:
        try:
            if self._sender is None:
                self._sender = self._make_sender()
            return await self._sender.send(request)
        except Exception as exc:  # the sender's own bug: still an outcome, never a failed turn
            log.warning("action request failed unexpectedly (%s)", type(exc).__name__)
            return HttpResult(kind="unreachable", reason="the request failed")

    def _credentials_refused(self, tool: CompiledTool, status: int) -> None:
        names = sorted({found.name for segments in tool.headers.values() for found in placeholders(segments)})
        secrets = ", ".join(f"${{{name}}}" for name in names if name in tool.secrets) or "none is sent"
        log.error(
            "action %s: the operator's API refused the bot's credentials (HTTP %d): check the token the tool's "
            "headers send (%s) in the environment and in ACTIONS_FILE",
            tool.name,
            status,
            secrets,
        )

    def _audit(
        self, tool: str, arguments: Mapping[str, Any], outcome: ActionOutcome, seconds: float, key: str | None
    ) -> None:
        audit.info(
            "action tool=%s args=%s outcome=%s status=%s ms=%d key=%s",
            tool[:64],
            digest(arguments, self._audit_key),
            outcome.kind,
            outcome.status if outcome.status is not None else "-",
            round(seconds * 1000),
            key or "-",
        )
