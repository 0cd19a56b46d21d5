"""``Catalog.run``: each answer of the operator's API (or none) becomes an outcome the model can
explain, never an exception; one audit line per call; a refused credential is one ERROR line naming
the fix; no secret and no argument value in any log line or outcome."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import Any

import pytest

from services.actions.catalog import audit_key, digest
from services.actions.request import HttpResult, PreparedRequest
from services.core.actions import ActionOutcome, Customer
from tests.unit.services.actions.shop import SECRET, catalog

CUSTOMER = Customer(telegram_id=4242, phone="+15550100")
ORDER = {"status": "shipped", "eta": "2026-12-06", "items": [{"name": "kettle"}], "total": 41.5, "card": "4111"}


class FakeSender:
    """The sender's seam: records each request and answers with the result it was given."""

    def __init__(self, result: HttpResult | Exception) -> None:
        self.result = result
        self.requests: list[PreparedRequest] = []
        self.closed = False

    async def send(self, request: PreparedRequest) -> HttpResult:
        self.requests.append(request)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    async def close(self) -> None:
        self.closed = True


def answer(status: int, body: Any = ORDER, kind: str = "ok") -> HttpResult:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return HttpResult(kind=kind, status=status, body=raw, seconds=0.25, content_type="application/json")  # type: ignore[arg-type]


async def run(
    result: HttpResult | Exception, tool: str = "order_status", key: bytes | None = None, **arguments: Any
) -> tuple[ActionOutcome, FakeSender]:
    sender = FakeSender(result)
    tools = catalog(sender=sender, audit_key=key)
    outcome = await tools.run(tool, arguments or {"order_id": "5521"}, CUSTOMER, idempotency_key="key-1")
    await tools.close()
    assert sender.closed or not sender.requests
    return outcome, sender


async def test_an_answer_is_projected() -> None:
    outcome, sender = await run(answer(200))
    assert outcome.kind == "ok" and outcome.status == 200 and outcome.seconds == 0.25
    assert outcome.data == {"status": "shipped", "eta": "2026-12-06", "items.*.name": ["kettle"], "total": 41.5}
    assert json.loads(outcome.note) == outcome.data and "4111" not in outcome.note
    assert outcome.line == "order_status order_id=5521: status=shipped, eta=2026-12-06, items.*.name=kettle, total=41.5"
    assert sender.requests[0].url == "https://shop.example.com/api/orders/5521"
    assert outcome.requested


FAILURES = [
    (HttpResult(kind="timeout", reason="no complete answer within 15 s"), "timeout", "did not answer in time", None),
    (answer(404, {"error": "no such order"}, "http_error"), "failed", "refused the request (HTTP 404)", 404),
    (answer(500, b"<html>oops</html>", "http_error"), "failed", "failed (HTTP 500)", 500),
    (answer(302, b"", "http_error"), "failed", "answered with a redirect (HTTP 302), which is not followed", 302),
    (answer(200, b"<html>not json</html>"), "failed", "answered with something that is not JSON", 200),
    (HttpResult(kind="oversize", status=200), "failed", "sent an answer too large to read", 200),
    (HttpResult(kind="unreachable", reason="connection refused"), "failed", "could not be reached", None),
    (HttpResult(kind="refused", reason="127.0.0.1 is a loopback address"), "refused", "was not sent: 127.0.0.1", None),
    (RuntimeError(f"bug {SECRET}"), "failed", "could not be reached", None),
]


@pytest.mark.parametrize(("result", "kind", "note", "status"), FAILURES)
async def test_each_failure_is_an_outcome_the_model_can_explain(
    result: HttpResult | Exception, kind: str, note: str, status: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    outcome, _ = await run(result)
    assert (outcome.kind, outcome.status) == (kind, status)
    assert note in outcome.note and outcome.note.startswith(("the order_status service", "the request to"))
    assert outcome.data is None and "oops" not in outcome.note and "no such order" not in outcome.note
    assert_no_secret(caplog, outcome)


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_credential_is_an_error_line_naming_the_fix(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    outcome, _ = await run(answer(status, {"error": "bad token"}, "http_error"))
    assert outcome.kind == "failed"
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert errors == [
        f"action order_status: the operator's API refused the bot's credentials (HTTP {status}): check the token "
        "the tool's headers send (${SHOP_API_TOKEN}) in the environment and in ACTIONS_FILE"
    ]
    assert_no_secret(caplog, outcome)


def assert_no_secret(caplog: pytest.LogCaptureFixture, outcome: ActionOutcome) -> None:
    texts = [record.getMessage() for record in caplog.records] + [str(dataclasses.asdict(outcome))]
    assert all(SECRET not in text and "Bearer" not in text for text in texts), texts


async def test_one_audit_line_per_call_without_values(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="services.actions.audit")
    key = audit_key("123456:the-bot-token")
    assert key is not None
    outcome, _ = await run(answer(200, {}), "cancel_order", key, order_id="5521", reason="changed_mind")
    assert outcome.kind == "ok" and outcome.note == "done: the cancel_order service accepted it (HTTP 200)"
    audit = [r for r in caplog.records if r.name == "services.actions.audit"]
    assert len(audit) == 1 and audit[0].levelno == logging.INFO
    message = audit[0].getMessage()
    expected_digest = digest({"order_id": "5521", "reason": "changed_mind"}, key)
    assert message.startswith(f"action tool=cancel_order args={expected_digest} outcome=ok status=200 ms=")
    assert message.endswith(" key=key-1") and len(expected_digest) == 12
    assert "5521" not in message and "changed_mind" not in message and SECRET not in message


async def test_the_audit_digest_is_keyed_so_an_order_number_cannot_be_found_by_trying(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="services.actions.audit")
    arguments = {"order_id": "5521"}
    unkeyed = hashlib.sha256(json.dumps(arguments, separators=(",", ":")).encode()).hexdigest()[:12]
    key = audit_key("123456:the-bot-token")
    assert key is not None and key == audit_key("123456:the-bot-token"), "the same in every worker"
    assert audit_key("") is None
    assert digest(arguments, key) != digest(arguments, b"another deployment") and digest(arguments, key) != unkeyed
    for given in (key, None, None):  # without a key: one made per catalog
        await run(answer(200), "order_status", given, **arguments)
    shown = [r.getMessage().split(" args=")[1][:12] for r in caplog.records if r.name == "services.actions.audit"]
    assert shown[0] == digest(arguments, key) and unkeyed not in shown and len(set(shown)) == 3


async def test_the_write_carries_the_key_and_the_read_does_not() -> None:
    _, write = await run(answer(200, {}), "cancel_order", order_id="5521", reason="other")
    _, read = await run(answer(200))
    assert write.requests[0].headers["Idempotency-Key"] == "key-1"
    assert "Idempotency-Key" not in read.requests[0].headers


async def test_nothing_is_sent_for_a_call_that_cannot_be_made() -> None:
    sender = FakeSender(answer(200))
    tools = catalog(sender=sender)
    no_phone = Customer(telegram_id=4242)
    needs = await tools.run("refund", {"order_id": "5521", "amount": 3}, no_phone, idempotency_key="k")
    assert needs.kind == "needs_contact" and "phone number" in needs.note
    bad = await tools.run("order_status", {"order_id": "../admin"}, CUSTOMER, idempotency_key=None)
    assert bad.kind == "refused" and bad.note.startswith("refused: order_id: does not have the expected form")
    unknown = await tools.run("drop_tables", {}, CUSTOMER, idempotency_key=None)
    assert unknown.kind == "refused" and not unknown.requested
    assert sender.requests == []


def test_the_ports_contract_is_met() -> None:
    from services.ports.actions import ActionTools

    tools: ActionTools = catalog()
    assert tools.names() == ["order_status", "cancel_order", "refund"]
    assert [tools.risk(name) for name in tools.names()] == ["read", "write", "approval"]
    assert [tools.needs_phone(name) for name in tools.names()] == [False, False, True]
