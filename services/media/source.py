"""A turn's files before they are read: what the update says of them (``Incoming``, nothing
downloaded), the download already prepared by the bot, and the reader that reads them. The bot hands
it to ``ChatService.begin``, which reads it only for a new turn whose text is within its limit, so a
redelivered turn or an over-long caption downloads nothing. The bot crosses into the services once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from services.core.turn_media import TurnMedia
from services.media.reader import Download, Incoming, MediaReader


@dataclass(slots=True)
class MediaSource:
    reader: MediaReader
    items: Sequence[Incoming]
    download: Download
    """(file_id, max_bytes) → bytes: Telegram's file server for the bot, a local file for the console."""
    media: TurnMedia | None = field(default=None, init=False)
    """What ``read`` made of the files, once it has (the caller tells of a document cut short)."""

    def check(self) -> None:
        """Refuse before any download (MediaError): a kind turned off, a file over a cap..."""
        self.reader.check(self.items)

    async def read(self, chat_id: int) -> TurnMedia:
        """The files read into what the turn carries (MediaError for a file the bot cannot use)."""
        self.media = await self.reader.read(chat_id, self.items, download=self.download)
        return self.media
