"""The provider watch: a refusal is an ERROR line once a minute per cause, a gauge and a counter; the
next accepted call clears the gauge and /readyz's check."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from bot.provider_health import ProviderWatch


def test_a_refusal_is_logged_once_a_minute_per_cause_and_cleared_by_an_accepted_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    now = [0.0]
    watch = ProviderWatch(
        refusing=Gauge("refusing", "", ["call"], registry=registry),
        refusals=Counter("refusals", "", ["call", "status"], registry=registry),
        clock=lambda: now[0],
    )
    caplog.set_level(logging.WARNING, logger="bot.provider_health")
    for _ in range(3):
        watch.refused("chat", 401, "HTTP 401")
    watch.refused("chat", 404, "HTTP 404")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and "OPENAI_API_KEY" in errors[0].getMessage() and "OPENAI_MODEL" in errors[1].getMessage()
    assert not watch.healthy
    assert registry.get_sample_value("refusing", {"call": "chat"}) == 1
    assert registry.get_sample_value("refusals_total", {"call": "chat", "status": "401"}) == 3
    now[0] = 61.0
    watch.refused("chat", 401, "HTTP 401")
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 3
    watch.accepted("chat")
    assert watch.healthy and registry.get_sample_value("refusing", {"call": "chat"}) == 0
