"""Runs Debian's nginx on loopback with a shipped configuration, rewritten only where the test
environment differs (listen address, resolver, upstream name, temp paths)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def nginx_binary() -> str:
    binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if binary is None:
        raise RuntimeError("nginx is not installed (scripts/test installs it)")
    return binary


def rewrite(conf: str, replacements: dict[str, str]) -> str:
    """Replace each key exactly as it appears in the shipped file (a test must notice if it changed)."""
    for old, new in replacements.items():
        assert old in conf, f"{old!r} is no longer in the shipped configuration"
        conf = conf.replace(old, new)
    return conf


class Nginx:
    def __init__(self, conf: str, workdir: Path, port: int) -> None:
        self.dir = workdir
        self.port = port
        temp = "".join(
            f"  {name}_temp_path {workdir}/{name};\n" for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        self.conf = conf.replace("http {\n", "http {\n" + temp, 1)
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, within: float = 10) -> None:
        path = self.dir / "nginx.conf"
        path.write_text(self.conf)
        self.process = await asyncio.create_subprocess_exec(
            nginx_binary(),
            "-p",
            str(self.dir),
            "-c",
            str(path),
            "-e",
            str(self.dir / "error.log"),
            "-g",
            f"daemon off; pid {self.dir}/nginx.pid;",
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            if self.process.returncode is not None:
                raise AssertionError(f"nginx exited: {self.error_log()}")
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                await writer.wait_closed()
                return
            except OSError:
                if loop.time() > deadline:
                    raise AssertionError(f"nginx did not listen on {self.port}: {self.error_log()}") from None
                await asyncio.sleep(0.05)

    def error_log(self) -> str:
        log = self.dir / "error.log"
        return log.read_text() if log.exists() else ""

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            await asyncio.wait_for(self.process.wait(), 10)
        shutil.rmtree(self.dir, ignore_errors=True)
