"""The Lua scripts of the Redis work queue (``queue.RedisWorkQueue`` registers them): each touches one
chat's keys or one global key (Redis Cluster), and returns the ``Status`` names of ``scripts``. Each
script says its KEYS, ARGV and reply above it."""

from __future__ import annotations

from services.backends.redis.scripts import LUA_MARK_REPLIED, LUA_NOW

SEEN_KEPT = 5000
"""How many recent item ids per chat are remembered to recognise redeliveries."""

_STORE_ITEM = """
local function store_item(inbox, seen, item_id, item_json, seen_ttl, order)
  if redis.call('ZSCORE', seen, item_id) then return NOTHING end
  redis.call('ZADD', seen, now, item_id)
  redis.call('ZREMRANGEBYRANK', seen, 0, -SEEN_KEPT - 1)
  if tonumber(seen_ttl) > 0 then redis.call('EXPIRE', seen, seen_ttl) end
  redis.call('ZADD', inbox, order, item_json)
  redis.call('PERSIST', inbox)
  return DONE
end
""".replace("SEEN_KEPT", str(SEEN_KEPT))
"""Defines ``store_item(...)`` → 1 stored, 0 already taken in (needs ``now``)."""

_TAKE_HEAD = """
local function take_head(lease, inbox, attempts)
  local entry = redis.call('ZRANGE', inbox, 0, 0, 'WITHSCORES')
  local head = entry[1]
  if not head then
    redis.call('DEL', lease, attempts)
    return {NOTHING}
  end
  local id = string.match(head, '^{"id":"([^"]*)"') or head
  local started = redis.call('HINCRBY', attempts, 'a:' .. id, 1)
  local transient = tonumber(redis.call('HGET', attempts, 't:' .. id) or '0')
  local failed = tonumber(redis.call('HGET', attempts, 'x:' .. id) or '0')
  local first = tonumber(redis.call('HGET', attempts, 'f:' .. id) or '0')
  local age = 0
  if first > 0 then age = now - first end
  local asked = tonumber(redis.call('HGET', attempts, 'r:' .. id) or '0')
  local wait = tonumber(redis.call('HGET', attempts, 'w:' .. id) or '0') - now
  if wait < 0 then wait = 0 end
  local given_up = tonumber(redis.call('HGET', attempts, 'g:' .. id) or '0')
  return {DONE, head, started, transient, age, entry[2], failed, asked, wait, given_up}
end
"""
"""Defines ``take_head(lease, inbox, attempts)``: the inbox head with its attempt counted, or the chat
released when the inbox is empty (needs ``now``). → {NOTHING} | {DONE, head, started, transient, age_ms, order,
failed, model requests, ms until it may be retried, given-up stage}"""

# KEYS: inbox, seen. ARGV: item_id, item_json, seen_ttl, order. → 1 new, 0 already seen
ENQUEUE = LUA_NOW + _STORE_ITEM + "return store_item(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4])"

# KEYS: inbox, seen, lease, attempts. ARGV: item_id, item_json, seen_ttl, order, token, lease_ms.
# Store the item, then take the chat's lease if nobody holds it. → {new, BUSY} | {new, NOTHING} inbox empty
# (the item was processed before), released | {new, DONE, head, started, transient, age_ms, order, failed}
ENQUEUE_TAKE = (
    LUA_NOW
    + _STORE_ITEM
    + _TAKE_HEAD
    + """
local new = store_item(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
if not redis.call('SET', KEYS[3], ARGV[5], 'NX', 'PX', ARGV[6]) then return {new, BUSY} end
local step = take_head(KEYS[3], KEYS[1], KEYS[4])
table.insert(step, 1, new)
return step
"""
)

# KEYS: ready, wake (one slot). ARGV: chat member. Make the chat due now (never postpones an earlier due
# time) and wake one idle worker.
MARK_READY = (
    LUA_NOW
    + """
redis.call('ZADD', KEYS[1], 'LT', now, ARGV[1])
redis.call('LPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], 0, 999)
return now
"""
)

# KEYS: ready. ARGV: lease_ms. → {member, watchdog_score, others due (0/1)} or nil
CLAIM = (
    LUA_NOW
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 2)
if #due == 0 then return nil end
local watchdog = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], 'XX', watchdog, due[1])
return {due[1], watchdog, #due - 1}
"""
)

# KEYS: lease, inbox, attempts, replied. ARGV: token, lease_ms, acquire (1 = take the lease first), done
# member ('' = none), done item id, replied ttl, replied score, turn ids whose replies went out...
# → {BUSY} | {LEASE_LOST} | {NOTHING} inbox empty, released
#   | {DONE, head, started, transient, age_ms, order, failed}
NEXT = (
    LUA_NOW
    + LUA_MARK_REPLIED
    + _TAKE_HEAD
    + """
if ARGV[3] == '1' then
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {BUSY} end
else
  local holder = redis.call('GET', KEYS[1])
  if holder ~= ARGV[1] then
    -- the lease lapsed: nothing is acknowledged, but the replies sent are recorded unless another
    -- worker took the chat (scripts.LUA_FENCE: nobody_else_holds)
    if not holder and #ARGV > 7 then mark_replied(KEYS[4], ARGV[7], tonumber(ARGV[6]), {unpack(ARGV, 8)}) end
    return {LEASE_LOST}
  end
end
if #ARGV > 7 then mark_replied(KEYS[4], ARGV[7], tonumber(ARGV[6]), {unpack(ARGV, 8)}) end
if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[4])
  local id = ARGV[5]
  redis.call('HDEL', KEYS[3], 'a:' .. id, 't:' .. id, 'x:' .. id, 'f:' .. id, 'n:' .. id, 'r:' .. id, 'w:' .. id,
    'g:' .. id)
end
return take_head(KEYS[1], KEYS[2], KEYS[3])
"""
)

# KEYS: lease, attempts, replied. ARGV: token, item id, kind ('t' transient: does not count as a failed
# attempt, the first one's time bounds how long the item is retried; 'x' failed; 's' set aside unfinished,
# e.g. on shutdown: counts as nothing), attempt number, model requests the attempt made, retry not
# sooner than this many ms (0: at once), replied ttl, replied score, turn ids whose replies went out...
# An attempt is counted once: the same note sent again (a re-send after a lost reply) or a second note
# of one attempt (set aside while backing off) only writes the reply marks. A lapsed lease that nobody
# else took still takes the reply marks (they record what was sent) and the wait (the provider's
# Retry-After, which holds for whoever asks next), nothing else.
NOTE = (
    LUA_NOW
    + LUA_MARK_REPLIED
    + """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return LEASE_LOST end
if #ARGV > 8 then mark_replied(KEYS[3], ARGV[8], tonumber(ARGV[7]), {unpack(ARGV, 9)}) end
if not holder then  -- lapsed, nobody else took the chat: only the reply marks and the wait
  if tonumber(ARGV[6]) > 0 then redis.call('HSET', KEYS[2], 'w:' .. ARGV[2], now + tonumber(ARGV[6])) end
  return LEASE_LOST
end
if redis.call('HGET', KEYS[2], 'n:' .. ARGV[2]) == ARGV[4] then return NOTHING end
redis.call('HSET', KEYS[2], 'n:' .. ARGV[2], ARGV[4])
if tonumber(ARGV[5]) > 0 then redis.call('HINCRBY', KEYS[2], 'r:' .. ARGV[2], ARGV[5]) end
if tonumber(ARGV[6]) > 0 then redis.call('HSET', KEYS[2], 'w:' .. ARGV[2], now + tonumber(ARGV[6])) end
local kind = ARGV[3]
if kind == 's' then kind = 't' else
  if kind == 't' then redis.call('HSETNX', KEYS[2], 'f:' .. ARGV[2], now) end
end
redis.call('HINCRBY', KEYS[2], kind .. ':' .. ARGV[2], 1)
return DONE
"""
)

# KEYS: lease, attempts. ARGV: token, item id, stage (ports.queue: DEAD_LETTERED, TOLD, FINISHED). Only
# raises the stage, unless another worker holds the chat: like a reply mark, the stage records what was
# done (the dead letter kept, the customer told), true even after the caller's lease lapsed.
GIVEN_UP = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return LEASE_LOST end
if tonumber(redis.call('HGET', KEYS[2], 'g:' .. ARGV[2]) or '0') < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[2], 'g:' .. ARGV[2], ARGV[3])
end
return DONE
"""

# KEYS: ready. ARGV: member, delay (ms). The chat is due again at ``due`` (a retry not sooner than asked);
# an update marked due meanwhile finds its inbox head waiting and defers it again.
DEFER = (
    LUA_NOW
    + """
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return DONE
"""
)

# KEYS: lease. ARGV: token, lease_ms.
RENEW_LEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return NOTHING end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return DONE
"""

# KEYS: ready. ARGV: member, lease_ms → the chat's score: a watchdog a lease away for a chat whose lease
# is about to be taken outside a claim, unless it has an entry already (due, or another holder's watchdog)
WATCH = (
    LUA_NOW
    + """
redis.call('ZADD', KEYS[1], 'NX', now + tonumber(ARGV[2]), ARGV[1])
return redis.call('ZSCORE', KEYS[1], ARGV[1])
"""
)

# KEYS: ready. ARGV: member, lease_ms → push the watchdog (only later, only if present)
PUSH_WATCHDOG = (
    LUA_NOW
    + """
local watchdog = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', 'GT', watchdog, ARGV[1])
return watchdog
"""
)

# KEYS: ready. ARGV: member, watchdog score. Drop the watchdog unless new work moved the score — or the
# watchdog already passed: then new work may have been marked due without moving it (ZADD LT keeps an
# earlier score), and leaving it costs at most one empty claim.
DROP_WATCHDOG = (
    LUA_NOW
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) and tonumber(score) > now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return DONE
end
return NOTHING
"""
)

# KEYS: lease. ARGV: token.
DROP_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0  -- DEL's count, not a status
"""

# KEYS: ready. → {depth_due, oldest_due_age_ms}
STATS = (
    LUA_NOW
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
local count = redis.call('ZCOUNT', KEYS[1], '-inf', now)
if #due == 0 then return {count, 0} end
return {count, now - tonumber(due[2])}
"""
)
