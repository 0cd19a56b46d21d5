"""What every backend's action ledger promises (services.ports.actions.ActionLedger): an outcome is
recorded once by its key (the first writer wins), a pending decision is stored once and moved by
one caller only (past its expiry only to ``expired``), finished once, the actions' lines kept in
order, the phone remembered, and /forget removes all of it. Runs over every backend through the
``backend`` fixture (tests/conftest.py: memory, fakeredis, a real redis-server, a cluster)."""

from __future__ import annotations

import asyncio

import pytest

from services.core.actions import ActionOutcome, Customer, PendingAction
from services.core.errors import LeaseLostError
from services.core.fence import Fence
from services.ports.backend import Backend

NOW = 1_000_000.0


def read_outcome(line: str = "order_status 5521: shipped") -> ActionOutcome:
    data = {"status": "shipped", "eta": "2026-12-06"}
    return ActionOutcome("ok", "shipped, arrives Dec 6", data, 200, 0.2, None, line)


def cancel(action_id: str = "a1", *, expires: float = NOW + 600) -> PendingAction:
    return PendingAction(
        action_id=action_id,
        chat_id=1,
        tool="cancel_order",
        risk="write",
        arguments={"order_id": "5521"},
        prompt="Cancel order 5521?",
        idempotency_key=f"key-{action_id}",
        created=NOW,
        expires=expires,
        customer=Customer(42, "+15550100"),
    )


async def test_an_outcome_is_recorded_once_by_its_key(backend: Backend) -> None:
    ledger = backend.actions
    assert await ledger.recorded(1, "k1") is None
    await ledger.record(1, "k1", read_outcome())
    await ledger.record(1, "k1", read_outcome("a second writer"))
    assert await ledger.recorded(1, "k1") == read_outcome(), "the first record stands, data and all"
    assert await ledger.recorded(2, "k1") is None, "chats are independent"
    assert await ledger.lines(1) == ["order_status 5521: shipped"]


async def test_a_pending_action_is_stored_once_and_decided_by_one_caller(backend: Backend) -> None:
    ledger = backend.actions
    await ledger.put_pending(cancel())
    await ledger.put_pending(cancel())  # a retried turn stores it again: nothing changes
    stored = await ledger.pending(1, "a1")
    assert stored == cancel() and stored is not None and stored.state == "pending"
    assert [p.action_id for p in await ledger.open_pending(1)] == ["a1"]
    decisions = await asyncio.gather(*(ledger.decide(1, "a1", "confirmed", now=NOW + 1) for _ in range(5)))
    moved = [d for d in decisions if d is not None]
    assert len(moved) == 1 and moved[0].state == "confirmed", "two presses, two workers: one decision"
    assert await ledger.decide(1, "a1", "declined", now=NOW + 2) is None
    assert await ledger.open_pending(1) == []
    await ledger.put_pending(cancel())
    assert (await ledger.pending(1, "a1")).state == "confirmed", "a decided action is not reset"  # type: ignore[union-attr]


async def test_past_its_expiry_only_expired_moves_it(backend: Backend) -> None:
    ledger = backend.actions
    await ledger.put_pending(cancel(expires=NOW + 10))
    assert await ledger.decide(1, "a1", "confirmed", now=NOW + 11) is None
    expired = await ledger.decide(1, "a1", "expired", now=NOW + 11)
    assert expired is not None and expired.state == "expired"
    assert await ledger.decide(1, "a1", "confirmed", now=NOW) is None
    assert await ledger.decide(1, "missing", "confirmed", now=NOW) is None


async def test_finish_keeps_the_outcome_once_and_adds_its_line(backend: Backend) -> None:
    ledger = backend.actions
    await ledger.put_pending(cancel())
    await ledger.decide(1, "a1", "confirmed", now=NOW)
    done = ActionOutcome("ok", "cancelled", {"status": "cancelled"}, 200, 0.1, "key-a1", "cancel_order 5521: cancelled")
    await ledger.finish(1, "a1", done)
    await ledger.finish(1, "a1", ActionOutcome("failed", "again", line="a second finish"))
    finished = await ledger.pending(1, "a1")
    assert finished is not None and finished.state == "done" and finished.result == done
    await ledger.record(1, "k2", read_outcome("order_status 7718: delivered"))
    assert await ledger.lines(1) == ["cancel_order 5521: cancelled", "order_status 7718: delivered"]


async def test_the_phone_is_remembered_per_chat(backend: Backend) -> None:
    ledger = backend.actions
    assert await ledger.phone(1) is None
    await ledger.set_phone(1, "+15550100")
    assert await ledger.phone(1) == "+15550100" and await ledger.phone(2) is None


async def test_forget_chat_removes_every_action_record(backend: Backend) -> None:
    ledger = backend.actions
    await ledger.record(1, "k1", read_outcome())
    await ledger.put_pending(cancel())
    await ledger.set_phone(1, "+15550100")
    await ledger.record(2, "k1", read_outcome("another chat"))
    await backend.forget_chat(1)
    assert await ledger.recorded(1, "k1") is None and await ledger.pending(1, "a1") is None
    assert await ledger.lines(1) == [] and await ledger.phone(1) is None and await ledger.open_pending(1) == []
    assert await ledger.lines(2) == ["another chat"], "other chats keep theirs"


async def test_a_write_under_a_lost_lease_is_refused(backend: Backend) -> None:
    """A worker that lost the chat (perhaps to one that ran /forget since) records nothing."""
    if type(backend).__name__ == "InMemoryBackend":
        pytest.skip("one process: no leases")
    stale = Fence("not-the-holder", valid_until=1e12)
    redis = backend.redis  # type: ignore[attr-defined]
    await redis.set(backend.keys.chat(1).lease, "the-holder")  # type: ignore[attr-defined]
    with pytest.raises(LeaseLostError):
        await backend.actions.record(1, "k1", read_outcome(), fence=stale)
    assert await backend.actions.recorded(1, "k1") is None
