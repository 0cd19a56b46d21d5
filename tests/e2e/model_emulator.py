"""An independent, fault-injecting OpenAI API emulator (LLMock, from PyPI) as a separate process.

Our own stub (tests/stubs/openai_server.py) only shows the faults we thought of; LLMock is written by
others against the official SDKs: its error bodies, Retry-After / retry-after-ms headers and broken
streams are its own. It is started with its documented CLI (``llmock serve``) on a free loopback port
and driven through its documented control API (``/_llmock/scenario``, ``/_llmock/requests``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


class ModelEmulator:
    """``llmock serve`` on 127.0.0.1 and an OS-chosen port; its control API as async methods."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._log = tempfile.NamedTemporaryFile(prefix="llmock-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def base_url(self) -> str:
        """What an OpenAI client's ``base_url`` is set to."""
        return f"{self.url}/v1"

    def start(self, within: float = 30) -> None:
        executable = Path(sys.executable).with_name("llmock")
        # its settings come from flags only: LLMOCK_* variables of the caller's environment are dropped
        env = {name: value for name, value in os.environ.items() if not name.startswith("LLMOCK_")}
        args = ["serve", "--host", "127.0.0.1", "--port", "0", "--log-level", "info"]
        args += ["--response-style", "echo", "--tool-mode", "off"]
        self.process = subprocess.Popen(
            [str(executable), *args], stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.monotonic() + within
        while not (found := _LISTENING.search(self.log())):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"llmock did not start; its output:\n{self.log()}")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{found.group(1)}"

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, f"{self.url}/_llmock{path}", json=body) as response,
        ):
            response.raise_for_status()
            return await response.json()

    async def reset(self) -> None:
        """Forget requests and queued behaviours (between tests)."""
        await self._call("POST", "/reset")

    async def script(self, *behaviors: dict[str, Any]) -> None:
        """Queue behaviours in LLMock's JSON form, e.g. ``{"type": "fail", "status": 429, "retry_after": 1}``."""
        await self._call("POST", "/scenario", {"behaviors": list(behaviors)})

    async def requests(self) -> list[dict[str, Any]]:
        """Every model request served since the last reset, oldest first (LLMock's journal)."""
        return list((await self._call("GET", "/requests"))["requests"])

    async def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in await self.requests() if r["path"].endswith("/chat/completions")]

    async def verdict(self) -> dict[str, Any]:
        """LLMock's own judgement of the client (retry_after_ignored, truncated_stream_accepted, ...)."""
        return dict(await self._call("GET", "/verdict"))
