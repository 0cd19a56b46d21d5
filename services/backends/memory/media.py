"""MediaMemos and Albums of the in-process backend (``services.ports.media``; its session store's TTL,
/forget via ``forget``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from services.ports.media import AlbumItem, MemoKind, album_id


class _Expiring:
    def __init__(self, *, ttl_seconds: float, clock: Callable[[], float]) -> None:
        self._ttl = ttl_seconds
        self._now = clock
        self._expires: dict[int, float] = {}

    def _live(self, chat_id: int, records: dict[int, dict[str, str]]) -> dict[str, str]:
        expires = self._expires.get(chat_id)
        if expires is not None and expires <= self._now():
            records.pop(chat_id, None)
            self._expires.pop(chat_id, None)
        return records.setdefault(chat_id, {})

    def _touch(self, chat_id: int) -> None:
        if self._ttl > 0:
            self._expires[chat_id] = self._now() + self._ttl


class InMemoryMediaMemos(_Expiring):
    def __init__(self, *, ttl_seconds: float = 0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ttl_seconds=ttl_seconds, clock=clock)
        self._memos: dict[int, dict[str, str]] = {}

    async def get(self, chat_id: int, kind: MemoKind, file_unique_id: str) -> str | None:
        return self._live(chat_id, self._memos).get(f"{kind}:{file_unique_id}")

    async def put(self, chat_id: int, kind: MemoKind, file_unique_id: str, text: str) -> None:
        self._live(chat_id, self._memos)[f"{kind}:{file_unique_id}"] = text
        self._touch(chat_id)

    def forget(self, chat_id: int) -> None:
        self._memos.pop(chat_id, None)


class InMemoryAlbums(_Expiring):
    def __init__(self, *, ttl_seconds: float = 0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ttl_seconds=ttl_seconds, clock=clock)
        self._items: dict[int, dict[str, str]] = {}
        self._takers: dict[int, dict[str, str]] = {}

    async def add(self, chat_id: int, group: str, item: AlbumItem) -> int:
        self._live(chat_id, self._items).setdefault(f"{album_id(group)}:{item.message_id}", item.to_json())
        self._touch(chat_id)
        return await self.count(chat_id, group)

    async def count(self, chat_id: int, group: str) -> int:
        return sum(1 for key in self._live(chat_id, self._items) if key.rpartition(":")[0] == group)

    async def take(self, chat_id: int, group: str, turn_id: str) -> tuple[AlbumItem, ...]:
        items = self._live(chat_id, self._items)
        takers = self._takers.setdefault(chat_id, {})
        mine = []
        for key, raw in items.items():
            if key.rpartition(":")[0] == group and takers.setdefault(key, turn_id) == turn_id:
                mine.append(AlbumItem.from_json(raw))
        self._touch(chat_id)
        return tuple(sorted(mine, key=lambda item: item.message_id))

    async def forget(self, chat_id: int) -> None:
        """The photos a turn took go; those still waiting for their turn stay (as in Redis)."""
        items, takers = self._items.get(chat_id, {}), self._takers.pop(chat_id, {})
        for key in takers:
            items.pop(key, None)
