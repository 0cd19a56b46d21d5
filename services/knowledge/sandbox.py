"""Documents are read in a child process that can be stopped: a job past its deadline is killed
with its process and the child's memory is capped (RLIMIT_AS), so no file holds a worker thread,
the event loop (pure-Python parsing holds the GIL) or the process's memory.

``Sandbox`` keeps one child, one job at a time (a new child after a kill, or after it left: idle
IDLE_SECONDS or its parent gone). The child gets an empty environment (no secret; only PYTHONPATH)
and logs nothing. Length-prefixed frames on its stdin/stdout: a JSON job (``extraction.Job``) and
the bytes in, one JSON answer out. ``python -m services.knowledge.sandbox MEMORY_BYTES`` is the child."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from services.knowledge.documents import UnreadableDocument
from services.knowledge.extraction import Job

MEMORY_BYTES: Final = 1 << 30
"""The child's address space (RLIMIT_AS): parsing past it is a MemoryError, refused as too complex."""
IDLE_SECONDS: Final = 30.0
MAX_ANSWER_BYTES: Final = 128 << 20
_CHUNK: Final = 1 << 16


class ChildGone(Exception):
    """The child ended (crashed, killed by the kernel, left idle) before it answered."""


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


class Sandbox:
    """A child process that extracts documents, one job at a time (thread-safe: jobs wait their turn)."""

    def __init__(self, *, memory_bytes: int = MEMORY_BYTES) -> None:
        self._memory_bytes = memory_bytes
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.started = 0
        """Children started so far."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def extract(self, job: Job, data: bytes, *, timeout: float) -> dict[str, Any]:
        """The child's answer to ``job`` (extraction.run); UnreadableDocument(kind="too_complex")
        when it is not done within ``timeout`` seconds (the child is killed), "unreadable" when the
        child died on it."""
        payload = _frame(json.dumps(asdict(job)).encode()) + _frame(data)
        with self._lock:
            for attempt in (1, 2):
                reused = self._process is not None and self._process.poll() is None
                process = self._process if reused and self._process is not None else self._spawn()
                try:
                    return self._exchange(process, payload, time.monotonic() + timeout)
                except TimeoutError:
                    self._kill()
                    late = f"too complex to read: not done within {timeout:g} s"
                    raise UnreadableDocument(late, kind="too_complex") from None
                except ChildGone:
                    code = self._kill()
                    if not reused or attempt == 2:  # a fresh child died on it: the file did it
                        raise UnreadableDocument(f"the reader stopped on this file (exit code {code})") from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._kill()

    def _spawn(self) -> subprocess.Popen[bytes]:
        self._kill()
        root = str(Path(__file__).resolve().parents[2])
        self._process = subprocess.Popen(
            # -P: the working directory is not on the import path
            [sys.executable, "-P", "-m", "services.knowledge.sandbox", str(self._memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={"PYTHONPATH": root},  # nothing of the parent's environment: its secrets stay out
            cwd="/",  # not the project folder, where .env usually is
            close_fds=True,
        )
        self.started += 1
        return self._process

    def _kill(self) -> int | None:
        """The child killed (if still running) and reaped; its exit code (negative: the signal)."""
        process, self._process = self._process, None
        if process is None:
            return None
        with contextlib.suppress(OSError):
            process.kill()
        code = process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return code

    def _exchange(self, process: subprocess.Popen[bytes], payload: bytes, deadline: float) -> dict[str, Any]:
        """Write ``payload`` and read one answer frame, both bounded by ``deadline``."""
        assert process.stdin is not None and process.stdout is not None
        writer, reader = process.stdin.fileno(), process.stdout.fileno()
        os.set_blocking(writer, False)
        view, sent, received = memoryview(payload), 0, bytearray()
        with selectors.DefaultSelector() as selector:
            selector.register(writer, selectors.EVENT_WRITE)
            selector.register(reader, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                for key, _ in selector.select(left):
                    if key.fd == writer:
                        try:
                            sent += os.write(writer, view[sent : sent + _CHUNK])
                        except (BrokenPipeError, BlockingIOError) as exc:
                            if isinstance(exc, BrokenPipeError):
                                raise ChildGone from None
                        if sent == len(view):
                            selector.unregister(writer)
                        continue
                    chunk = os.read(reader, 1 << 20)
                    if not chunk:
                        raise ChildGone
                    received += chunk
                    answer = _answer(received)
                    if answer is not None:
                        return answer


def _answer(received: bytearray) -> dict[str, Any] | None:
    """The answer once its whole frame came, else None."""
    if len(received) < 4:
        return None
    size = int.from_bytes(received[:4], "big")
    if size > MAX_ANSWER_BYTES:
        raise ChildGone
    if len(received) < 4 + size:
        return None
    answer: dict[str, Any] = json.loads(bytes(received[4 : 4 + size]))
    return answer


def _read_exact(size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(0, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_frame() -> bytes | None:
    head = _read_exact(4)
    return None if head is None else _read_exact(int.from_bytes(head, "big"))


def _answer_job(header: bytes, data: bytes) -> dict[str, Any]:
    from services.knowledge.extraction import run

    try:
        return run(Job(**json.loads(header)), data)
    except MemoryError:
        return {"refused": "over the reader's memory limit", "kind": "too_complex"}
    except RecursionError:
        return {"refused": "nested too deeply", "kind": "too_complex"}
    except Exception as exc:  # a parser's bug on a strange file: refused, the child lives on
        return {"refused": f"cannot read: {type(exc).__name__}", "kind": "unreadable"}


def main() -> None:
    """The child: jobs from stdin until it closes or stays idle for IDLE_SECONDS."""
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else MEMORY_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with selectors.DefaultSelector() as selector:
        selector.register(0, selectors.EVENT_READ)
        while selector.select(IDLE_SECONDS):
            try:
                header = _read_frame()
                data = _read_frame() if header is not None else None
                if header is None or data is None:
                    return
                answer = json.dumps(_answer_job(header, data)).encode()
            except MemoryError:  # the job's bytes alone over the cap: answered, then a fresh child
                header = data = None
                refused = {"refused": "over the reader's memory limit", "kind": "too_complex"}
                sys.stdout.buffer.write(_frame(json.dumps(refused).encode()))
                sys.stdout.buffer.flush()
                return
            sys.stdout.buffer.write(_frame(answer))
            sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
