"""The media contracts: what a chat's photos and voice notes leave behind between attempts of a turn.

``MediaMemos``: a transcript or an image note, kept by Telegram's ``file_unique_id`` so a redelivered
update does not pay the provider twice. ``Albums``: the photos of one Telegram album (one update
each), collected so the album is answered as one turn. Both are records of the chat: ``/forget``
removes them, and they expire with the session (SESSION_TTL_SECONDS).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Protocol

MemoKind = Literal["transcript", "note"]


class MediaMemos(Protocol):
    async def get(self, chat_id: int, kind: MemoKind, file_unique_id: str) -> str | None:
        """The memo stored for this file in this chat, None when there is none."""
        ...

    async def put(self, chat_id: int, kind: MemoKind, file_unique_id: str, text: str) -> None:
        """Store (or replace) the memo; it expires with the chat's session."""
        ...


@dataclass(frozen=True, slots=True)
class AlbumItem:
    """One photo (or image file) of an album, as its update carried it."""

    message_id: int
    file_id: str
    file_unique_id: str
    caption: str = ""
    file_size: int | None = None
    width: int = 0
    height: int = 0
    kind: Literal["photo", "image_file"] = "photo"
    """A photo, or an image sent as a file (a document to Telegram: shown to operators as one)."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "m": self.message_id,
                "f": self.file_id,
                "u": self.file_unique_id,
                "c": self.caption,
                "s": self.file_size,
                "w": self.width,
                "h": self.height,
                "k": self.kind,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> AlbumItem:
        data = json.loads(raw)
        size = data.get("s")
        return cls(
            message_id=int(data["m"]),
            file_id=str(data["f"]),
            file_unique_id=str(data["u"]),
            caption=str(data.get("c") or ""),
            file_size=int(size) if size is not None else None,
            width=int(data.get("w") or 0),
            height=int(data.get("h") or 0),
            kind="image_file" if data.get("k") == "image_file" else "photo",
        )


def album_id(group: str) -> str:
    """``group`` (Telegram's ``media_group_id``) checked to be usable as part of a record's name."""
    if not group or any(c in group for c in ":,"):
        raise ValueError(f"an album id has no ':' or ',': {group!r}")
    return group


class Albums(Protocol):
    async def add(self, chat_id: int, group: str, item: AlbumItem) -> int:
        """Record ``item`` of album ``group`` once (by message id); how many items the album has now."""
        ...

    async def count(self, chat_id: int, group: str) -> int:
        """How many items of the album are recorded."""
        ...

    async def take(self, chat_id: int, group: str, turn_id: str) -> tuple[AlbumItem, ...]:
        """The album's items no other turn took, now taken by ``turn_id``, with those ``turn_id`` took
        before (a redelivered turn gets its items again), by message id. Each item is taken once."""
        ...

    async def forget(self, chat_id: int) -> None:
        """/forget: the items a turn took go (with who took them); those no turn took yet stay: they
        belong to updates still in the chat's queue, which /forget leaves to be answered."""
        ...
