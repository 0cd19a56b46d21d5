"""Many chats, several worker processes, kills: drive the traffic and check the invariants.

Shared by the scale-out tests and benchmarks/chaos.py."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from services.ports.sessions import SessionStore
from tests.stubs.telegram_server import StubTelegram


def customer_text(chat_id: int, n: int) -> str:
    return f"c{chat_id} m{n}"


def expected_reply(chat_id: int, n: int) -> str:
    return f"Support answer to: {customer_text(chat_id, n)}"


@dataclass
class WebhookSender:
    """Posts updates like Telegram: one chat's updates one after another, retried on another worker
    until one answers 200; different chats in parallel."""

    telegram: StubTelegram
    urls: list[str]
    secret: str
    dead: set[int] = field(default_factory=set)
    sent_at: dict[tuple[int, int], float] = field(default_factory=dict)
    update_ids: dict[tuple[int, int], int] = field(default_factory=dict)
    retries: int = 0
    _next: itertools.count[int] = field(default_factory=itertools.count)

    async def send_chat(self, http: aiohttp.ClientSession, chat_id: int, messages: int) -> None:
        for n in range(messages):
            await self.send_chat_message(http, chat_id, n)

    async def send_chat_message(self, http: aiohttp.ClientSession, chat_id: int, n: int) -> None:
        update = self.telegram.message_update(chat_id, customer_text(chat_id, n))
        self.sent_at[(chat_id, n)] = time.monotonic()
        self.update_ids[(chat_id, n)] = int(update["update_id"])
        await self._post(http, update)

    async def post(self, http: aiohttp.ClientSession, update: dict[str, object]) -> None:
        """Post one update until a worker answers 200 (as Telegram retries)."""
        await self._post(http, update)

    async def _post(self, http: aiohttp.ClientSession, update: dict[str, object]) -> None:
        headers = {"X-Telegram-Bot-Api-Secret-Token": self.secret}
        while True:
            index = next(self._next) % len(self.urls)
            if index in self.dead:
                continue
            try:
                async with http.post(
                    self.urls[index], json=update, headers=headers, timeout=aiohttp.ClientTimeout(total=5)
                ) as response:
                    if response.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            self.retries += 1
            await asyncio.sleep(0.05)


@dataclass
class Report:
    chats: int
    sent: int
    answered: int
    stored_turns: int
    lost: int
    doubled: int
    out_of_order: int
    duplicate_replies: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    stuck: int = 0
    resurrected: int = 0
    lease_lost_duplicates: int = 0

    def line(self) -> str:
        return (
            f"chats={self.chats} sent={self.sent} answered={self.answered} stored_turns={self.stored_turns} "
            f"lost={self.lost} doubled={self.doubled} out_of_order={self.out_of_order} "
            f"duplicate_replies={self.duplicate_replies} seconds={self.seconds:.1f}"
        )


Expected = Callable[[int, int], str]
"""(chat, message number) → the reply it must get (the chaos benchmark's stub model marks its end)."""


def answered(telegram: StubTelegram, chats: list[int], messages: int, reply: Expected = expected_reply) -> int:
    replies = Counter(c.params.get("text") for c in telegram.of("sendMessage"))
    return sum(1 for chat in chats for n in range(messages) if replies[reply(chat, n)] > 0)


async def wait_all_answered(telegram: StubTelegram, chats: list[int], messages: int, within: float) -> None:
    deadline = time.monotonic() + within
    total = len(chats) * messages
    while answered(telegram, chats, messages) < total:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {answered(telegram, chats, messages)} of {total} answered in {within}s")
        await asyncio.sleep(0.1)


async def check(
    telegram: StubTelegram,
    store: SessionStore,
    chats: list[int],
    messages: int,
    started: float,
    reply: Expected = expected_reply,
) -> Report:
    replies = Counter(c.params.get("text") for c in telegram.of("sendMessage"))
    duplicate_replies = sum(
        replies[reply(c, n)] - 1 for c in chats for n in range(messages) if replies[reply(c, n)] > 1
    )
    stored = lost = doubled = out_of_order = 0
    for chat in chats:
        session = await store.load(chat)
        users = [m.content for m in session.messages if m.role == "user"]
        want = [customer_text(chat, n) for n in range(messages)]
        stored += len(users)
        counts = Counter(users)
        lost += sum(1 for text in want if counts[text] == 0)
        doubled += sum(count - 1 for count in counts.values() if count > 1)
        firsts = list(dict.fromkeys(users))
        out_of_order += 0 if firsts == [t for t in want if t in counts] else 1
        roles = [m.role for m in session.messages]
        assert roles == ["user", "assistant"] * (len(roles) // 2), f"chat {chat}: broken turns {roles}"
    return Report(
        chats=len(chats),
        sent=len(chats) * messages,
        answered=answered(telegram, chats, messages, reply),
        stored_turns=stored,
        lost=lost,
        doubled=doubled,
        out_of_order=out_of_order,
        duplicate_replies=duplicate_replies,
        seconds=time.monotonic() - started,
    )


def random_chats(count: int, seed: int = 7) -> list[int]:
    rng = random.Random(seed)
    return rng.sample(range(10_000, 99_999), count)
