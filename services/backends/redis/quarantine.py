"""Sessions moved aside because they could not be read (``RedisSessionStore.quarantine``): what an
operator lists, reads and drops (``python -m bot quarantine``)."""

from __future__ import annotations

from typing import Any

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import AnyRedis, redis_errors
from services.ports.deadletters import Quarantined


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _strings(found: dict[Any, Any]) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in found.items()}


class RedisQuarantine:
    """Errors surface as StoreUnavailableError."""

    def __init__(self, *, redis: AnyRedis, keys: KeySpace) -> None:
        self._redis = redis
        self._keys = keys

    async def list(self) -> list[Quarantined]:
        found: list[Quarantined] = []
        with redis_errors("cannot list quarantined sessions"):
            async for key in self._redis.scan_iter(match=self._keys.chat_pattern("q_info"), count=1000):
                name = _text(key)
                info = _strings(await self._redis.hgetall(name))
                found.append(Quarantined(self._keys.chat_id_of(name), float(info.get("at", 0)), info.get("reason", "")))
        return found

    async def show(self, chat_id: int) -> dict[str, Any] | None:
        """The quarantined copy as stored (info, meta, raw messages), or None."""
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot read the quarantined session of chat {chat_id}"):
            info = await self._redis.hgetall(keys.q_info)
            if not info:
                return None
            meta = await self._redis.hgetall(keys.q_meta)
            messages = await self._redis.lrange(keys.q_msgs, 0, -1)
        return {"info": _strings(info), "meta": _strings(meta), "messages": [_text(m) for m in messages]}

    async def drop(self, chat_id: int) -> int:
        """Delete the quarantined copy; returns how many keys went."""
        keys = self._keys.chat(chat_id)
        with redis_errors(f"cannot drop the quarantined session of chat {chat_id}"):
            return int(await self._redis.delete(keys.q_meta, keys.q_msgs, keys.q_info))
