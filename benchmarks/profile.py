"""CPU accounting of worker processes: process CPU time from /proc, and a py-spy sampling profile
broken down by component (which library, or which of our Redis calls, the CPU went to).

py-spy (``pip install py-spy``) samples the worker from outside (``--nonblocking``: the worker is
never paused), so the profile costs the worker almost nothing. Only samples where Python was busy are
recorded (no ``--idle``), so shares are shares of the worker's CPU. Native code (tiktoken, the
JSON codecs, hiredis) is charged to the Python frame that called it."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


# (component, path fragment), tried on each frame from the innermost outwards; the first frame that
# matches decides. Generic code (asyncio, json, pydantic, aiohttp's client, typing...) matches nothing
# and is charged to whoever called it.
_RULES: list[tuple[str, str]] = [
    ("tokenization (tiktoken)", "tiktoken"),
    ("Redis client", "^/redis/"),  # redis-py itself ("^": at the start), not services/backends/redis
    ("openai client (incl. httpx)", "/openai/"),
    ("openai client (incl. httpx)", "/httpx"),
    ("openai client (incl. httpx)", "/httpcore/"),
    ("openai client (incl. httpx)", "/anyio/"),
    ("openai client (incl. httpx)", "/h11/"),
    ("aiogram: Bot API requests", "/aiogram/client/"),
    ("aiogram: Bot API requests", "/aiogram/methods/"),
    ("aiogram: Bot API requests", "/aiogram/utils/chat_action"),
    ("aiogram: dispatch and update parsing", "/aiogram/"),
    ("metrics (prometheus_client)", "/prometheus_client/"),
    ("logging", "/logging/"),
    ("logging", "bot/logs.py"),
    ("reply rendering (markdown)", "telegramify_markdown"),
    ("reply rendering (markdown)", "bot/telegram/render.py"),
    ("webhook intake", "/bot/queueing/intake.py"),
    ("worker loop and Update parsing (bot/queueing/worker.py)", "/bot/queueing/worker.py"),
    ("worker loop and Update parsing (bot/queueing/worker.py)", "/bot/queueing/heartbeat.py"),
    ("worker loop and Update parsing (bot/queueing/worker.py)", "/bot/queueing/retrying.py"),
    ("event loop, sockets, other", "/bot/__main__.py"),
    ("event loop, sockets, other", "/bot/modes/"),
    ("our code (services/, bot/)", "/services/"),
    ("our code (services/, bot/)", "/bot/"),
    ("aiohttp web server", "/aiohttp/web_"),
]
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*?)(?::\d+)?\)$")
_OUR_REDIS_CALLERS = ("services/backends/redis/", "bot/queueing/intake.py")


def _matches(fragment: str, rooted: str) -> bool:
    return rooted.startswith(fragment[1:]) if fragment.startswith("^") else fragment in rooted


@dataclass
class Breakdown:
    samples: int = 0
    components: Counter[str] = field(default_factory=Counter)
    redis_callers: Counter[str] = field(default_factory=Counter)
    """Samples in the Redis client, by our function that made the call."""
    leaves: Counter[str] = field(default_factory=Counter)

    def add_stack(self, frames: list[str], count: int) -> None:
        parsed = [m.groups() if (m := _FRAME.match(f)) else (f, "") for f in frames]
        self.samples += count
        if parsed:
            self.leaves[f"{parsed[-1][0]} ({Path(parsed[-1][1]).name})"] += count
        component = "event loop, sockets, other"
        for _function, path in reversed(parsed):
            rooted = "/" + path  # py-spy prints paths relative to sys.path entries: "redis/client.py"
            match = next((name for name, fragment in _RULES if _matches(fragment, rooted)), None)
            if match:
                component = match
                break
        self.components[component] += count
        if component == "Redis client":
            caller = next(
                (f"{fn} ({Path(p).name})" for fn, p in reversed(parsed) if any(c in p for c in _OUR_REDIS_CALLERS)),
                "send task (redis-py writes commands from a task of its own)",
            )
            self.redis_callers[caller] += count

    def add_raw(self, text: str) -> None:
        """py-spy ``--format raw``: one ``frame;frame;...;frame count`` line per distinct stack, root first."""
        for line in text.splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                self.add_stack([f for f in stack.split(";") if not f.startswith(("process ", "thread "))], int(count))

    def report(self, cpu_ms_per_turn: float | None = None, top: int = 12) -> list[str]:
        def share(n: int) -> str:
            part = n / self.samples if self.samples else 0.0
            ms = f" ≈ {part * cpu_ms_per_turn:5.2f} ms/turn" if cpu_ms_per_turn else ""
            return f"{part:6.1%}{ms}"

        lines = [f"profile: {self.samples} samples"]
        lines += [f"  {name:<40} {share(n)}" for name, n in self.components.most_common()]
        if self.redis_callers:
            lines.append("  Redis client time by calling function:")
            lines += [f"    {name:<38} {share(n)}" for name, n in self.redis_callers.most_common()]
        lines.append(f"  top {top} leaf functions:")
        lines += [f"    {name[:60]:<60} {share(n)}" for name, n in self.leaves.most_common(top)]
        return lines


class Sampler:
    """``py-spy record`` attached to one process until ``stop``."""

    def __init__(self, pid: int, output: Path, rate: int = 200) -> None:
        self.pid, self.output, self.rate = pid, output, rate
        self._process: asyncio.subprocess.Process | None = None

    @staticmethod
    def binary() -> str | None:
        beside = Path(sys.executable).parent / "py-spy"
        return str(beside) if beside.exists() else shutil.which("py-spy")

    async def start(self) -> None:
        binary = self.binary()
        if binary is None:
            raise RuntimeError("--profile needs py-spy: .venv/bin/pip install py-spy")
        self._process = await asyncio.create_subprocess_exec(
            binary,
            "record",
            "--pid",
            str(self.pid),
            "--rate",
            str(self.rate),
            "--nonblocking",
            "--format",
            "raw",
            "--output",
            str(self.output),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )

    async def stop(self) -> str:
        if self._process is None:
            return ""
        if self._process.returncode is None:
            self._process.send_signal(signal.SIGINT)
        await asyncio.wait_for(self._process.wait(), 30)
        return self.output.read_text() if self.output.exists() else ""
