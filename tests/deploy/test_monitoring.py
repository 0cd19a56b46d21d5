"""The shipped monitoring: Debian's Prometheus scrapes a running worker with deploy/prometheus.yml and
every query of the Grafana dashboard returns data; the dashboard, provisioning and compose files parse
and point at each other."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.monitoring import DASHBOARD, ROOT, dashboard_queries, monitored_worker


@pytest.mark.redis
async def test_every_dashboard_query_has_data_from_a_real_scrape() -> None:
    async with monitored_worker() as run:
        await run.converse(chats=2, messages=10)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:  # the last turns' counters reach Prometheus with a later scrape
            turns = await run.prometheus.query('sum(sb_turns_total{outcome="ok"})')
            if turns and float(turns[0]["value"][1]) == run.sent == 20:
                break
            assert loop.time() < deadline, f"turns counted: {turns}, sent: {run.sent}"
            await asyncio.sleep(0.5)
        # rate() needs two samples of a series: when every turn fell between two scrapes, the series
        # first appeared with its final value, and the next scrape gives the second sample
        while True:
            empty = [q for q in dashboard_queries() if not await run.prometheus.query(q.expr)]
            if not empty:
                break
            assert loop.time() < deadline, "no data: " + "; ".join(f"{q.panel}: {q.expr}" for q in empty)
            await asyncio.sleep(0.5)
        summaries = await run.prometheus.query("sum(sb_summary_calls_total)")
        assert float(summaries[0]["value"][1]) > 0, "the conversations were compacted"


def test_dashboard_and_provisioning_fit_together() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "support-bot" and len(dashboard["panels"]) >= 10
    assert all(p["datasource"]["uid"] == "prometheus" for p in dashboard["panels"])
    datasource = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["uid"] == "prometheus"
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/support-bot.yml").read_text())
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    grafana = compose["services"]["grafana"]
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in grafana["volumes"]}
    assert mounts[provider["providers"][0]["options"]["path"]] == "./deploy/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    assert grafana["profiles"] == compose["services"]["prometheus"]["profiles"] == ["monitoring"]
    assert "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in compose["services"]["prometheus"]["volumes"]
    tls = compose["services"]["tls"]
    assert tls["profiles"] == ["https"] and "./deploy/nginx-tls.conf:/etc/nginx/nginx.conf:ro" in tls["volumes"]
    scrape = yaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())["scrape_configs"][0]
    names = scrape["dns_sd_configs"][0]["names"]
    assert set(names) == {"bot", "bot-polling"} <= set(compose["services"])
    assert scrape["dns_sd_configs"][0]["port"] == 9100


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with Debian's prometheus package")
def test_promtool_accepts_the_shipped_config(tmp_path: Path) -> None:
    """The config as compose mounts it: its rule file at the path compose gives it (here beside it)."""
    config = (ROOT / "deploy/prometheus.yml").read_text()
    assert "/etc/prometheus/alerts.yml" in config
    (tmp_path / "alerts.yml").write_text((ROOT / "deploy/alerts.yml").read_text())
    (tmp_path / "prometheus.yml").write_text(config.replace("/etc/prometheus/alerts.yml", str(tmp_path / "alerts.yml")))
    done = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_alert_rules_are_loaded_and_watch_metrics_the_bot_exports() -> None:
    """deploy/alerts.yml is in prometheus.yml's rule_files, mounted there by compose, and every metric
    an alert reads is one bot.metrics defines."""
    import re

    from prometheus_client import REGISTRY

    import bot.metrics  # noqa: F401  (registers the metrics)

    config = yaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "./deploy/alerts.yml:/etc/prometheus/alerts.yml:ro" in compose["services"]["prometheus"]["volumes"]
    exported = {sample.name for family in REGISTRY.collect() for sample in family.samples} | {
        family.name for family in REGISTRY.collect()
    }
    rules = yaml.safe_load((ROOT / "deploy/alerts.yml").read_text())["groups"][0]["rules"]
    assert {rule["alert"] for rule in rules} >= {"ModelProviderRefusesBot"}
    for rule in rules:
        for name in re.findall(r"\bsb_[a-z_]+", rule["expr"]):
            assert name in exported, (rule["alert"], name)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with Debian's prometheus package")
def test_promtool_unit_tests_of_the_alert_rules_pass() -> None:
    done = subprocess.run(
        ["promtool", "test", "rules", str(ROOT / "tests/deploy/alerts_test.yml")], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
