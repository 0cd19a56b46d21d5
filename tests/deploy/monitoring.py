"""A monitored worker for tests and the dashboard picture: Redis, the stub LLM and Bot API, one webhook
worker and Debian's Prometheus scraping it with the shipped deploy/prometheus.yml. Two things differ from
the shipped file, both outside what the dashboard reads: the worker is a static target (Prometheus'
DNS discovery asks the system resolver, which here cannot know Docker's `bot` service) and the scrape
interval is 1 s (so a test needs seconds, not minutes)."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.conftest import RedisServer, free_port
from tests.e2e.processes import SECRET, BotProcess, base_env, start_webhook_worker
from tests.helpers import customer_line
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "support-bot.json"


@dataclass(frozen=True)
class Query:
    panel: str
    expr: str
    legend: str


def dashboard_queries(rate_interval: str = "30s") -> list[Query]:
    """Every query of the shipped dashboard, with Grafana's $__rate_interval made concrete."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        Query(panel["title"], target["expr"].replace("$__rate_interval", rate_interval), target["legendFormat"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]


def scrape_config(targets: list[str], interval: str = "1s") -> str:
    config: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = interval
    (job,) = config["scrape_configs"]
    del job["dns_sd_configs"]
    job["static_configs"] = [{"targets": targets}]
    return yaml.safe_dump(config)


class Prometheus:
    def __init__(self, config: str) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed (scripts/test installs Debian's package)")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="sb-prometheus-"))
        (self.dir / "prometheus.yml").write_text(config)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, within: float = 30) -> None:
        self.process = await asyncio.create_subprocess_exec(
            self.binary,
            f"--config.file={self.dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=(self.dir / "prometheus.log").open("wb"),
        )
        await self._until(lambda status, _body: status == 200, "/-/ready", within)

    async def _until(self, done: Any, path: str, within: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            while True:
                assert self.process is not None and self.process.returncode is None, self.log()
                try:
                    async with http.get(self.url + path) as response:
                        if done(response.status, await response.text()):
                            return
                except aiohttp.ClientError:
                    pass
                assert loop.time() < deadline, f"prometheus: {path} not as expected in {within}s\n{self.log()}"
                await asyncio.sleep(0.2)

    async def api(self, path: str, **params: str | float) -> Any:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.get(f"{self.url}/api/v1/{path}", params={k: str(v) for k, v in params.items()}) as response,
        ):
            body = await response.json()
        assert body["status"] == "success", body
        return body["data"]

    async def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = (await self.api("query", query=expr))["result"]
        return result

    async def wait_scraped(self, within: float = 30) -> None:
        """Until every target has been scraped successfully at least once."""

        def healthy(status: int, body: str) -> bool:
            targets = json.loads(body)["data"]["activeTargets"] if status == 200 else []
            return bool(targets) and all(t["health"] == "up" for t in targets)

        await self._until(healthy, "/api/v1/targets", within)

    def log(self) -> str:
        path = self.dir / "prometheus.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            await asyncio.wait_for(self.process.wait(), 20)
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class MonitoredWorker:
    prometheus: Prometheus
    telegram: StubTelegram
    llm: StubOpenAI
    webhook_url: str
    sent: int = 0

    async def converse(self, chats: int, messages: int, think: float = 0.0) -> None:
        """``chats`` customers, each sending ``messages`` messages one after another, each answered."""

        async def customer(http: aiohttp.ClientSession, chat: int) -> None:
            for n in range(messages):
                update = self.telegram.message_update(chat, customer_line(n))
                headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
                async with http.post(self.webhook_url, json=update, headers=headers) as response:
                    assert response.status == 200, response.status
                self.sent += 1
                await self.telegram.wait_messages(chat, n + 1, within=60)
                await asyncio.sleep(think)

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            await asyncio.gather(*(customer(http, 1000 + chat) for chat in range(chats)))


@asynccontextmanager
async def monitored_worker(llm_latency: float = 0.05) -> AsyncIterator[MonitoredWorker]:
    redis = RedisServer()
    redis.start()
    llm, telegram = StubOpenAI(latency=llm_latency), StubTelegram()
    await llm.start()
    await telegram.start()
    workdir = Path(tempfile.mkdtemp(prefix="sb-monitored-"))
    metrics_port = free_port()
    env = base_env(telegram, llm) | {
        "BOT_MODE": "webhook",
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_SECRET": SECRET,
        "REDIS_URL": redis.url,
        "LOG_LEVEL": "WARNING",
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(metrics_port),
        "CHAT_INPUT_TOKEN_BUDGET": "900",  # small: conversations get compacted (summary calls)
        "SUMMARY_MAX_TOKENS": "150",
        "RATE_LIMIT_PER_MINUTE": "0",
    }
    workers: list[BotProcess] = []
    prometheus = Prometheus(scrape_config([f"127.0.0.1:{metrics_port}"]))
    try:
        url = await start_webhook_worker(env, workdir, workers)
        await prometheus.start()
        await prometheus.wait_scraped()
        yield MonitoredWorker(prometheus, telegram, llm, url)
    finally:
        await prometheus.stop()
        for worker in workers:
            if worker.process is not None and worker.process.returncode is None:
                await worker.stop()
        await telegram.stop()
        await llm.stop()
        redis.remove()
        shutil.rmtree(workdir, ignore_errors=True)
