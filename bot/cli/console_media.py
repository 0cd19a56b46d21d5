"""Media in the console: ``/photo PATH [caption]`` and ``/file PATH [caption]`` send a local file,
as a ``MediaSource``, through the same reader a customer's file goes through (the size cap checked
before reading, the image shrunk, the document read within DOCUMENT_MAX_TOKENS, a voice note
transcribed)."""

from __future__ import annotations

import hashlib
import mimetypes
import shlex
from dataclasses import dataclass
from pathlib import Path

from services.core.errors import MediaError
from services.core.turn_media import TurnMedia
from services.media.reader import Incoming, IncomingKind, MediaReader
from services.media.source import MediaSource

COMMANDS = ("/photo", "/file")
USAGE = "/photo PATH [caption] sends a photo, /file PATH [caption] a file (document, image or audio)"


@dataclass(frozen=True, slots=True)
class MediaLine:
    kind: IncomingKind
    path: Path
    caption: str


def parse(line: str) -> MediaLine | str | None:
    """``line`` as a media command, a usage message (str) for a malformed one, None for plain text."""
    command = line.split(maxsplit=1)[0]
    if command not in COMMANDS:
        return None
    try:
        words = shlex.split(line)
    except ValueError as exc:  # an unclosed quote
        return f"{exc}: {USAGE}"
    if len(words) < 2:
        return USAGE
    path = Path(words[1]).expanduser()
    return MediaLine(_kind(command, path), path, " ".join(words[2:]))


def _kind(command: str, path: Path) -> IncomingKind:
    if command == "/photo":
        return "photo"
    mime = mimetypes.guess_type(path.name)[0] or ""
    return "image_file" if mime.startswith("image/") else "audio" if mime.startswith("audio/") else "document"


def _incoming(line: MediaLine) -> Incoming:
    stat = line.path.stat()
    unique = hashlib.sha256(f"{line.path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    mime = mimetypes.guess_type(line.path.name)[0]
    name = line.path.name
    return Incoming(line.kind, f"console:{name}", unique, stat.st_size, mime_type=mime, file_name=name)


async def read(reader: MediaReader, chat_id: int, line: MediaLine) -> TurnMedia:
    """The file as a turn's media; MediaError as the bot would refuse it, OSError if it cannot be read."""
    item = _incoming(line)

    async def download(file_id: str, max_bytes: int) -> bytes:
        with line.path.open("rb") as file:
            data = file.read(max_bytes + 1)  # a file grown since stat() is still capped
        if len(data) > max_bytes:
            raise MediaError(f"over {max_bytes} bytes", kind=item.family, reason="too_big", limit=max_bytes)
        return data

    return await MediaSource(reader, [item], download).read(chat_id)
