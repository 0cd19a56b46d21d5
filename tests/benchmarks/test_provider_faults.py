"""The fault proxy's check that Retry-After was honoured (benchmarks/provider_faults.early_retries)."""

from __future__ import annotations

from benchmarks.provider_faults import Logged, early_retries

WALL = 1_000_000.0


def logged(at: float, *, stream: bool, retry_after: float | None = None) -> Logged:
    status = 429 if retry_after is not None else 200
    fault = "rate_limited" if retry_after is not None else "ok"
    return Logged(at, at + 0.01, (7, 3), False, stream, fault, status, retry_after, WALL + at)


def test_a_request_sooner_than_the_retry_after_is_early() -> None:
    log = [logged(0.0, stream=True, retry_after=0.623), logged(0.1, stream=True)]
    assert early_retries(log) == ["(7, 3): 0.09s after a 429 asking 0.623s"]


def test_the_worker_that_took_the_chat_over_during_the_429_never_saw_it() -> None:
    log = [logged(0.0, stream=True, retry_after=0.623), logged(0.1, stream=False)]
    assert early_retries(log, {7: [WALL + 0.5]}, lease=2.0) == []
    assert early_retries(log, {8: [WALL + 0.5]}, lease=2.0) != [], "another chat's takeover explains nothing"
    assert early_retries(log, {7: [WALL + 30.0]}, lease=2.0) != [], "nor one long after"
    same_worker = [logged(0.0, stream=True, retry_after=0.623), logged(0.1, stream=True)]
    assert early_retries(same_worker, {7: [WALL + 0.5]}, lease=2.0) != [], "the worker told to wait"
