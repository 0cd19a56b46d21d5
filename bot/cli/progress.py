"""A knowledge build's progress as an operator sees it: a bar redrawn on one line when stderr is a
terminal, else (logs collected by Docker or systemd) a log line every few seconds."""

from __future__ import annotations

import sys
from typing import TextIO

from services.knowledge.progress import IndexProgress, ProgressLog, ProgressSink

BAR_WIDTH = 30


class TerminalBar:
    """Redraws ``[#####-----] read 120 of 300 files, 900 passages`` in place; a finished stage ends its
    line, so the log lines that follow start on their own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, event: IndexProgress) -> None:
        filled = BAR_WIDTH * event.done // event.total if event.total else BAR_WIDTH
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        end = "\n" if event.done >= event.total else ""
        self._stream.write(f"\r\x1b[2Kknowledge [{bar}] {event.describe()}{end}")
        self._stream.flush()


def progress_sink(stream: TextIO | None = None) -> ProgressSink:
    """A bar on a terminal, else a log line every few seconds."""
    stream = stream if stream is not None else sys.stderr
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a real stream
        terminal = False
    return TerminalBar(stream) if terminal else ProgressLog()
