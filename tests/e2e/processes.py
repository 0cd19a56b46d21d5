"""``python -m bot`` as a real child process, configured by environment variables only."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.e2e.harness import TOKEN
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

SECRET = "webhook-secret_123"
API_KEY = "sk-test-very-secret-key"


class BotProcess:
    def __init__(self, env: dict[str, str], cwd: Path, *, prefix: Sequence[str] = (), module: str = "bot") -> None:
        self.prefix = list(prefix)
        """Run ``python -m bot`` under this command (e.g. valgrind, for the load benchmark)."""
        self.module = module
        """What ``python -m`` runs (the load benchmark's reference bot is another module)."""
        self.env = {**os.environ, **env}
        for name in ("REDIS_URL", "BOT_MODE"):
            if name not in env:
                self.env.pop(name, None)
        self.cwd = cwd
        self.process: asyncio.subprocess.Process | None = None
        self.log = bytearray()
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.prefix,
            sys.executable,
            "-m",
            self.module,
            cwd=self.cwd,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while chunk := await self.process.stdout.read(4096):
            self.log.extend(chunk)

    async def wait_log(self, needle: str, within: float = 90) -> None:
        for _ in range(int(within * 20)):
            if needle in self.log.decode(errors="replace"):
                return
            assert self.process is not None
            if self.process.returncode is not None:
                break
            await asyncio.sleep(0.05)
        raise AssertionError(f"{needle!r} not logged; log:\n{self.log.decode(errors='replace')}")

    async def wait_http_ok(self, url: str, within: float = 90) -> None:
        """Wait until ``url`` answers 200 (e.g. the worker's /healthz)."""
        import aiohttp

        for _ in range(int(within * 10)):
            assert self.process is not None
            if self.process.returncode is not None:
                break
            try:
                async with aiohttp.ClientSession() as http, http.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"{url} never answered 200; log:\n{self.log.decode(errors='replace')}")

    async def stop(self, *, within: float = 20) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.process.wait(), within)
        if self._reader is not None:
            await self._reader
        return code


def base_env(telegram: StubTelegram, stub_llm: StubOpenAI) -> dict[str, str]:
    return {
        "BOT_TOKEN": TOKEN,
        "TELEGRAM_API_URL": telegram.base_url,
        "OPENAI_BASE_URL": stub_llm.base_url,
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_MODEL": "stub-chat",
        "OPENAI_MAX_RETRIES": "0",
        "LOG_LEVEL": "DEBUG",
        "METRICS_PORT": "0",
    }


async def start_webhook_worker(
    env: dict[str, str], workdir: Path, started: list[BotProcess], *, prefix: Sequence[str] = (), module: str = "bot"
) -> str:
    """Start one webhook worker on a free port (added to ``started`` first, so the caller's clean-up
    stops it even if it fails to come up); returns its webhook URL once /healthz answers."""
    from tests.conftest import free_port

    port = free_port()
    worker = BotProcess(env | {"WEBHOOK_PORT": str(port)}, workdir, prefix=prefix, module=module)
    started.append(worker)
    await worker.start()
    await worker.wait_http_ok(f"http://127.0.0.1:{port}/healthz", within=300 if prefix else 90)
    return f"http://127.0.0.1:{port}{env.get('WEBHOOK_PATH', '/telegram/webhook')}"


async def start_webhook_workers(env: dict[str, str], workdir: Path, started: list[BotProcess], count: int) -> list[str]:
    """``count`` webhook workers started side by side (each start is a whole interpreter start, mostly
    CPU: two cores start two at once); their webhook URLs, in the order of ``started``."""
    return list(await asyncio.gather(*(start_webhook_worker(env, workdir, started) for _ in range(count))))


def run_side_by_side(envs: list[dict[str, str]], cwd: Path, timeout: float = 90) -> list[tuple[int, str]]:
    """``python -m bot`` once per environment, all at once (each is a whole interpreter start); returns
    each process's exit code and output (stdout and stderr together)."""
    import subprocess

    started = [
        subprocess.Popen(
            [sys.executable, "-m", "bot"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for env in envs
    ]
    outputs = [process.communicate(timeout=timeout)[0] for process in started]
    return [(process.returncode, output) for process, output in zip(started, outputs, strict=True)]
