"""MediaMemos and Albums in Redis: two hashes of the chat (its hash slot, expiring with the session;
/forget deletes the memos with the session's content keys and the album photos a turn took). An
album is collected by one script per photo and taken by one script, so two workers never both answer
a photo. Every write is fenced by the lease of the work it runs in (``CURRENT_FENCE``): a worker
that lost the chat, perhaps to one that ran /forget since, leaves no transcript, note or photo
behind (LeaseLostError)."""

from __future__ import annotations

from services.backends.redis.keys import KeySpace
from services.backends.redis.scripts import LUA_FENCE, AnyRedis, Status, redis_errors, register
from services.core.errors import LeaseLostError
from services.core.fence import CURRENT_FENCE, token_of
from services.ports.media import AlbumItem, MemoKind, album_id

_MEMO_FIELD = {"transcript": "t:", "note": "n:"}

# KEYS: memos, lease. ARGV: field, text, ttl (ms), token.
_PUT_MEMO = (
    LUA_FENCE
    + """
if not holds(KEYS[2], ARGV[4]) then return FENCE_LOST end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 0
"""
)

_COUNT = """
local function count(list)
  local n = 0
  if list then for _ in string.gmatch(list, '[^,]+') do n = n + 1 end end
  return n
end
"""

# KEYS: albums, lease. ARGV: group, message id, item (JSON), ttl (ms), token. → items recorded.
_ADD = (
    _COUNT
    + LUA_FENCE
    + """
if not holds(KEYS[2], ARGV[5]) then return FENCE_LOST end
local order = 'l:' .. ARGV[1]
if redis.call('HSETNX', KEYS[1], 'i:' .. ARGV[1] .. ':' .. ARGV[2], ARGV[3]) == 1 then
  local list = redis.call('HGET', KEYS[1], order)
  redis.call('HSET', KEYS[1], order, (list and (list .. ',') or '') .. ARGV[2])
end
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return count(redis.call('HGET', KEYS[1], order))
"""
)

# KEYS: albums. ARGV: group.
_COUNT_ITEMS = _COUNT + "return count(redis.call('HGET', KEYS[1], 'l:' .. ARGV[1]))\n"

# KEYS: albums, lease. ARGV: group, turn id, ttl (ms), token. → the items this turn holds (taken now
# or before).
_TAKE = (
    LUA_FENCE
    + """
if not holds(KEYS[2], ARGV[4]) then return FENCE_LOST end
local out = {}
local list = redis.call('HGET', KEYS[1], 'l:' .. ARGV[1])
if not list then return out end
for mid in string.gmatch(list, '[^,]+') do
  local field = 't:' .. ARGV[1] .. ':' .. mid
  local taker = redis.call('HGET', KEYS[1], field)
  if not taker then
    redis.call('HSET', KEYS[1], field, ARGV[2])
    taker = ARGV[2]
  end
  if taker == ARGV[2] then table.insert(out, redis.call('HGET', KEYS[1], 'i:' .. ARGV[1] .. ':' .. mid)) end
end
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return out
"""
)

# KEYS: albums. /forget: the photos a turn took go with their takers; those no turn took yet are
# updates still in the chat's queue (recorded by the intake before they were queued): they stay.
_FORGET_TAKEN = """
local fields = redis.call('HKEYS', KEYS[1])
for _, order in ipairs(fields) do
  if string.sub(order, 1, 2) == 'l:' then
    local group = string.sub(order, 3)
    local kept = {}
    for mid in string.gmatch(redis.call('HGET', KEYS[1], order), '[^,]+') do
      local taker = 't:' .. group .. ':' .. mid
      if redis.call('HEXISTS', KEYS[1], taker) == 1 then
        redis.call('HDEL', KEYS[1], taker, 'i:' .. group .. ':' .. mid)
      else
        table.insert(kept, mid)
      end
    end
    if #kept == 0 then
      redis.call('HDEL', KEYS[1], order)
    else
      redis.call('HSET', KEYS[1], order, table.concat(kept, ','))
    end
  end
end
return 0
"""


def _fenced(result: object, chat_id: int) -> None:
    if result == Status.FENCE_LOST:
        raise LeaseLostError(f"chat {chat_id}: its lease is lost; the media record is not written")


class RedisMediaMemos:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace, ttl_seconds: float = 0) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_ms = max(0, int(ttl_seconds * 1000))
        self._put = register(redis, _PUT_MEMO)

    async def get(self, chat_id: int, kind: MemoKind, file_unique_id: str) -> str | None:
        with redis_errors(f"cannot read the media memos of chat {chat_id}"):
            raw = await self._redis.hget(self._keys.chat(chat_id).memos, _MEMO_FIELD[kind] + file_unique_id)
        return raw.decode() if isinstance(raw, bytes) else raw

    async def put(self, chat_id: int, kind: MemoKind, file_unique_id: str, text: str) -> None:
        keys = self._keys.chat(chat_id)
        args = [_MEMO_FIELD[kind] + file_unique_id, text, self._ttl_ms, token_of(CURRENT_FENCE.get())]
        with redis_errors(f"cannot store a media memo of chat {chat_id}"):
            _fenced(await self._put(keys=[keys.memos, keys.lease], args=args), chat_id)


class RedisAlbums:
    def __init__(self, *, redis: AnyRedis, keys: KeySpace, ttl_seconds: float = 0) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_ms = max(0, int(ttl_seconds * 1000))
        self._add = register(redis, _ADD)
        self._count = register(redis, _COUNT_ITEMS)
        self._take = register(redis, _TAKE)
        self._forget = register(redis, _FORGET_TAKEN)

    async def add(self, chat_id: int, group: str, item: AlbumItem) -> int:
        keys = self._keys.chat(chat_id)
        args = [album_id(group), item.message_id, item.to_json(), self._ttl_ms, token_of(CURRENT_FENCE.get())]
        with redis_errors(f"cannot record an album photo of chat {chat_id}"):
            recorded = await self._add(keys=[keys.albums, keys.lease], args=args)
        _fenced(recorded, chat_id)
        return int(recorded)

    async def count(self, chat_id: int, group: str) -> int:
        with redis_errors(f"cannot read an album of chat {chat_id}"):
            return int(await self._count(keys=[self._keys.chat(chat_id).albums], args=[album_id(group)]))

    async def take(self, chat_id: int, group: str, turn_id: str) -> tuple[AlbumItem, ...]:
        keys = self._keys.chat(chat_id)
        args = [album_id(group), turn_id, self._ttl_ms, token_of(CURRENT_FENCE.get())]
        with redis_errors(f"cannot take an album of chat {chat_id}"):
            raw = await self._take(keys=[keys.albums, keys.lease], args=args)
        _fenced(raw, chat_id)
        items = [AlbumItem.from_json(entry) for entry in raw]
        return tuple(sorted(items, key=lambda item: item.message_id))

    async def forget(self, chat_id: int) -> None:
        with redis_errors(f"cannot delete the album records of chat {chat_id}"):
            await self._forget(keys=[self._keys.chat(chat_id).albums])
