"""InMemoryConversationLog: the conversation log of one process (``services.ports.quality``), with the
same rules as Redis: one current conversation per chat, the feedback state none → asking → asked, and
a schedule of due chats whose claims hold for a while. Records go SESSION_TTL_SECONDS after the chat's last write."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from services.core.fence import Fence
from services.core.quality import Conversation, Rating
from services.ports.quality import Ask, Rated, Started


@dataclass
class _Chat:
    current: int | None = None
    last_ms: int = 0
    last_item: str = ""
    due_ms: int = 0
    open: bool = False
    ask: str = ""
    private: bool = True
    language: str = ""
    records: dict[int, Conversation] = field(default_factory=dict)
    rated_by: dict[int, str] = field(default_factory=dict)


class InMemoryConversationLog:
    def __init__(self, *, ttl_seconds: int = 0, clock: Callable[[], float] = time.time) -> None:
        self._chats: dict[int, _Chat] = {}
        self._due: dict[int, int] = {}
        self._ttl_ms = ttl_seconds * 1000  # 0: kept
        self._clock = clock

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _begin(self, chat_id: int, chat: _Chat, private: bool, sent_ms: int = 0) -> int:
        now = self._now()
        while now in chat.records:  # two conversations of one chat within a millisecond (tests)
            now += 1
        chat.current, chat.ask, chat.due_ms, chat.private, chat.last_ms, chat.open = now, "", 0, private, now, False
        started = sent_ms if 0 < sent_ms < now else now  # the message's own date
        chat.records[now] = Conversation(chat_id=chat_id, started_ms=started, private=private)
        if self._ttl_ms:  # (Redis drops the chat's whole hash that long after its last write)
            chat.records = {k: v for k, v in chat.records.items() if k >= now - self._ttl_ms}
        return now

    async def customer_message(
        self, chat_id: int, *, private: bool, language: str, gap_seconds: float, sent_ms: int = 0, item_id: str = ""
    ) -> Started:
        chat = self._chats.setdefault(chat_id, _Chat())
        if chat.current is not None and item_id and chat.last_item == item_id:  # a redelivery: counted
            return Started(False, chat.current)
        now = self._now()
        new = chat.current is None or now - chat.last_ms >= gap_seconds * 1000
        current = self._begin(chat_id, chat, private, sent_ms) if new or chat.current is None else chat.current
        self._count(chat, current, now, item_id)
        chat.due_ms, chat.language = 0, language
        self._due.pop(chat_id, None)
        return Started(new, current)

    def _count(self, chat: _Chat, current: int, now: int, item_id: str) -> None:
        record = chat.records[current]
        chat.records[current] = replace(record, messages=record.messages + 1)
        chat.last_ms, chat.last_item = now, item_id

    async def relayed(self, chat_id: int, *, item_id: str = "") -> None:
        chat = self._chats.get(chat_id)
        if chat is not None and chat.current is not None and not (item_id and chat.last_item == item_id):
            self._count(chat, chat.current, self._now(), item_id)

    async def answered(self, chat_id: int, *, ask_after_seconds: float) -> float | None:
        chat = self._chats.get(chat_id)
        if chat is None or chat.current is None:
            return None
        now, record, first = self._now(), chat.records[chat.current], None
        if not record.first_answer_ms:
            chat.records[chat.current] = replace(record, first_answer_ms=now)
            first = max(0, now - record.started_ms) / 1000
        asks = ask_after_seconds > 0 and chat.ask != "asked" and not chat.open and chat.private
        chat.due_ms = now + int(ask_after_seconds * 1000) if asks else 0
        if asks:
            self._due[chat_id] = chat.due_ms
        return first

    async def handoff_opened(self, chat_id: int, *, private: bool) -> tuple[bool, bool]:
        chat = self._chats.setdefault(chat_id, _Chat())
        started = chat.current is None
        current = chat.current if chat.current is not None else self._begin(chat_id, chat, private)
        record = chat.records[current]
        chat.records[current] = replace(record, handed_off=True)
        chat.open, chat.due_ms = True, 0
        self._due.pop(chat_id, None)
        return not record.handed_off, started

    async def handoff_ended(self, chat_id: int, *, ask: bool) -> None:
        chat = self._chats.get(chat_id)
        if chat is None:
            return
        chat.open = False
        if ask and chat.current is not None and chat.ask != "asked" and chat.private:
            chat.due_ms = self._due[chat_id] = self._now()

    async def ended(self, chat_id: int) -> None:
        chat = self._chats.get(chat_id)
        if chat is not None:
            chat.current, chat.due_ms = None, 0
        self._due.pop(chat_id, None)

    async def due(self, limit: int = 100) -> list[tuple[int, int]]:
        now = self._now()
        return sorted(((c, at) for c, at in self._due.items() if at <= now), key=lambda item: item[1])[:limit]

    async def claim(self, chat_id: int, due_ms: int, *, hold_seconds: float) -> int | None:
        now = self._now()
        if self._due.get(chat_id) != due_ms or due_ms > now:
            return None
        self._due[chat_id] = hold = now + int(hold_seconds * 1000)
        return hold

    async def release(self, chat_id: int, hold: int) -> None:
        if self._due.get(chat_id) == hold:
            del self._due[chat_id]

    async def begin_ask(self, chat_id: int, *, fence: Fence | None = None) -> Ask | None:
        chat = self._chats.get(chat_id)
        if chat is None or chat.current is None or chat.ask == "asked" or chat.open or not chat.private:
            return None
        if not chat.due_ms or chat.due_ms > self._now():
            return None
        again, chat.ask = chat.ask == "asking", "asking"
        return Ask(chat.current, chat.language, again=again)

    async def asked(self, chat_id: int, conversation: int, *, fence: Fence | None = None, sent: bool = True) -> bool:
        chat = self._chats.get(chat_id)
        if chat is None or chat.current != conversation or chat.ask == "asked":
            return False
        chat.ask, chat.due_ms = "asked", 0
        self._due.pop(chat_id, None)
        if sent:  # (refused by Telegram: never tried again, not recorded as asked)
            chat.records[conversation] = replace(chat.records[conversation], asked_ms=self._now())
        return True

    async def rate(self, chat_id: int, conversation: int, rating: Rating, *, item_id: str) -> Rated:
        chat = self._chats.get(chat_id)
        record = chat.records.get(conversation) if chat is not None else None
        if chat is None or record is None:
            return "none"
        if not record.asked_ms and not (chat.current == conversation and chat.ask == "asking"):
            return "none"  # never asked (a forged press)
        if record.rating:
            return "again" if chat.rated_by.get(conversation) == item_id else "none"
        chat.records[conversation] = replace(record, rating=rating)
        chat.rated_by[conversation] = item_id
        return "new"

    async def conversations(self, since_ms: int) -> list[Conversation]:
        found = [r for chat in self._chats.values() for r in chat.records.values() if r.started_ms >= since_ms]
        return sorted(found, key=lambda r: r.started_ms)

    async def forget(self, chat_id: int) -> None:
        self._chats.pop(chat_id, None)
        self._due.pop(chat_id, None)
