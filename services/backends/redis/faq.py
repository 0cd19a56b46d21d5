"""LearnedFaq in Redis: every key in one slot (``{<ns>:faq}``). An entry's versions are a list; the
entries hash holds each live entry's newest version with its number; the revision counter grows in
the same script as every change (what every worker's library polls). The daily digest is claimed with
SET NX per day, and each posted gap group is kept by its message id for the operators' replies."""

from __future__ import annotations

import time

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis, redis_errors, register
from services.core.knowledge import DigestPost, FaqEntry
from services.knowledge.learned import DIGEST_POST_DAYS, entry_from, post_from, post_json, version_json

# KEYS: entries, versions, revision. ARGV: id, version JSON, "new" | "edit". → version number, 0: refused.
_PUT = """
local exists = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
if (ARGV[3] == 'new') == exists then return 0 end
if ARGV[3] == 'new' and redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local n = redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], n .. ' ' .. ARGV[2])
redis.call('INCR', KEYS[3])
return n
"""

# KEYS: entries, revision. ARGV: id. → 1 removed, 0 no such entry.
_REMOVE = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('INCR', KEYS[2])
return 1
"""

DIGEST_MARK_SECONDS = 3 * 86400
MADE_SECONDS = 86400
"""How long the update that made an entry is remembered (its redeliveries come within minutes)."""


class RedisLearnedFaq:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace) -> None:
        self._redis = redis
        self._keys = keys
        self._put = register(redis, _PUT)
        self._remove = register(redis, _REMOVE)

    async def _write(self, entry_id: str, body: str, mode: str) -> int:
        keys = [self._keys.faq_entries, self._keys.faq_versions(entry_id), self._keys.faq_revision]
        with redis_errors("the FAQ entry was not saved"):
            return int(await self._put(keys=keys, args=[entry_id, body, mode]))

    async def add(self, questions: tuple[str, ...], answer: str, *, author: str, key: str | None = None) -> FaqEntry:
        now = time.time()
        body = version_json(questions, answer, author, now)
        entry_id = await self._reserve(key)
        while True:
            if entry_id is None:
                entry_id = await self._next_id()
            if await self._write(entry_id, body, "new"):
                return FaqEntry(entry_id, questions, answer, author, now, 1)
            if key is not None and (made := await self.history(entry_id)):
                return made[0]  # this key's entry, written by an attempt before this one
            entry_id = None  # an id whose versions exist (a removed entry's) is never reused

    async def _next_id(self) -> str:
        with redis_errors("the FAQ entry was not saved"):
            return str(await self._redis.incr(self._keys.faq_next_id))

    async def _reserve(self, key: str | None) -> str | None:
        """The id of the entry ``key`` makes: the one an earlier attempt reserved, or a new one,
        reserved before anything is written (an attempt that dies after it is redone with that id)."""
        if key is None:
            return None
        made = self._keys.faq_made(key)
        with redis_errors("the FAQ entry was not saved"):
            if (earlier := await self._redis.get(made)) is not None:
                return _text(earlier)
            entry_id = await self._next_id()
            if await self._redis.set(made, entry_id, nx=True, ex=MADE_SECONDS):
                return entry_id
            return _text(await self._redis.get(made) or entry_id)  # a concurrent attempt reserved first

    async def edit(self, entry_id: str, questions: tuple[str, ...], answer: str, *, author: str) -> FaqEntry | None:
        now = time.time()
        version = await self._write(entry_id, version_json(questions, answer, author, now), "edit")
        return FaqEntry(entry_id, questions, answer, author, now, version) if version else None

    async def remove(self, entry_id: str) -> bool:
        with redis_errors("the FAQ entry was not removed"):
            return bool(await self._remove(keys=[self._keys.faq_entries, self._keys.faq_revision], args=[entry_id]))

    async def entries(self) -> list[FaqEntry]:
        with redis_errors("the FAQ entries are unavailable"):
            stored = await self._redis.hgetall(self._keys.faq_entries)
        found = []
        for raw_id, raw in stored.items():
            number, _, body = _text(raw).partition(" ")
            found.append(entry_from(_text(raw_id), int(number), body))
        return sorted(found, key=_order)

    async def history(self, entry_id: str) -> list[FaqEntry]:
        with redis_errors("the FAQ entry's versions are unavailable"):
            versions = await self._redis.lrange(self._keys.faq_versions(entry_id), 0, -1)
        return [entry_from(entry_id, n, _text(raw)) for n, raw in enumerate(versions, start=1)]

    async def revision(self) -> int:
        with redis_errors("the FAQ revision is unavailable"):
            value = await self._redis.get(self._keys.faq_revision)
        return int(value or 0)

    async def claim_digest(self, day: str) -> bool:
        with redis_errors("the gaps digest was not claimed"):
            return bool(await self._redis.set(self._keys.gaps_digest(day), "1", nx=True, ex=DIGEST_MARK_SECONDS))

    async def release_digest(self, day: str) -> None:
        with redis_errors("the gaps digest's claim was not released"):
            await self._redis.delete(self._keys.gaps_digest(day))

    async def remember_post(self, message_id: int, post: DigestPost) -> None:
        with redis_errors("the digest message was not remembered"):
            await self._redis.set(self._keys.gaps_digest_post(message_id), post_json(post), ex=DIGEST_POST_DAYS * 86400)

    async def post(self, message_id: int) -> DigestPost | None:
        with redis_errors("the digest message is unavailable"):
            raw = await self._redis.get(self._keys.gaps_digest_post(message_id))
        return None if raw is None else post_from(raw)


def _order(entry: FaqEntry) -> tuple[int, str]:
    return (int(entry.id), entry.id) if entry.id.isdigit() else (0, entry.id)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
