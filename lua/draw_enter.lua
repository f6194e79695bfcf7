-- draw_enter.lua: a buyer's one entry in a drop's draw (src/draw/entries/), while entries are open.
--
-- KEYS[1]  draw meta          seckill:{group:<d>}:draw (lua/drop_seed.lua: opens_at_ms, closes_at_ms,
--                             per_buyer, sizes comma-joined, state, challenge_cost)
-- KEYS[2]  entries            seckill:{group:<d>}:draw:entries (hash: buyer -> "<sizes> <quantity> <entered_ms>")
-- KEYS[3]  entry stream       seckill:{group:<d>}:draw:stream (the worker copies each entry to Postgres)
-- KEYS[4]  spent challenges   seckill:{group:<d>}:line:challenges (sorted set: nonce -> expires_ms, shared
--                             with the drop line's joins: a solution is spent once)
-- ARGV[1]  buyer              user id, as the app validated it
-- ARGV[2]  sizes              the sizes' short names, best first, comma-joined (1-6, distinct: the app checked)
-- ARGV[3]  quantity           units wanted, 1-100 (the app checked; the draw's per_buyer is checked here)
-- ARGV[4]  challenge nonce    the proof of work's nonce the app verified, or "" without one
-- ARGV[5]  challenge expiry   when that challenge expires, Unix ms (the spent nonce is kept until then)
--
-- Returns:
--   {"entered", entered_ms}  the entry is kept and appended to the stream (Redis TIME, Unix ms)
--   {"duplicate", stored}    the buyer entered before: its entry as kept; nothing is written (checked
--                            first: answered whatever else the call says, the draw closed since too)
--   {"invalid", why}         a size is not the drop's, or the quantity is over per_buyer: nothing written
--   "unknown"                no draw meta: the drop is not in draw mode (or not seeded)
--   "not_open"               Redis TIME is before opens_at_ms
--   "closed"                 at or after closes_at_ms, or the draw has started (state not "open")
--   "challenge_required"     the draw asks a proof of work (challenge_cost) and ARGV[4] is ""
--   "challenge_replayed"     the nonce was spent before: nothing is written
--
-- Invariants kept: one entry per buyer (HGET before any write, in one atomic call); the entry's
-- HSET and XADD happen together or not at all: the XADD goes first (a failure there writes
-- nothing of the entry), and a failed HSET deletes the stream entry before raising; either
-- failure takes the nonce it spent back, so the same solution can enter once the key is mended. The stream's
-- entries go once the worker committed them (lua/trim.lua); the hash goes with the drop.
--
-- Assembled, not run as it stands: the line "-- @nonce_spend" below is followed by lua/nonce_spend.lua.
--
-- Example (after seeding a drop "kicks" in draw mode whose entries are open):
--   sed -e '/^-- @nonce_spend$/r lua/nonce_spend.lua' lua/draw_enter.lua > /tmp/seckill-draw-enter.lua
--   redis-cli --eval /tmp/seckill-draw-enter.lua 'seckill:{group:kicks}:draw' 'seckill:{group:kicks}:draw:entries' 'seckill:{group:kicks}:draw:stream' 'seckill:{group:kicks}:line:challenges' , alice 41,40 1 '' ''

-- @nonce_spend

local meta = redis.call('HMGET', KEYS[1], 'opens_at_ms', 'closes_at_ms', 'per_buyer', 'sizes', 'state',
  'challenge_cost')
if not meta[1] then
  return 'unknown'
end
local user, sizes, quantity = ARGV[1], ARGV[2], ARGV[3]
-- A buyer who entered hears of their entry before any other check: an entry sent again after
-- its answer was lost (or re-sent by a Redis Cluster client) learns it was kept, even once closed.
local stored = redis.call('HGET', KEYS[2], user)
if stored then
  return {'duplicate', stored}
end
local offered = ',' .. (meta[4] or '') .. ','
for size in string.gmatch(sizes, '[^,]+') do
  if not string.find(offered, ',' .. size .. ',', 1, true) then
    return {'invalid', 'sizes: ' .. size .. ' is not a size of the drop'}
  end
end
local limit = tonumber(meta[3]) or 1
if tonumber(quantity) > limit then
  return {'invalid', 'quantity must be 1-' .. limit .. ' (the drop\'s per_buyer)'}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now_ms < tonumber(meta[1]) then
  return 'not_open'
end
if now_ms >= tonumber(meta[2]) or (meta[5] and meta[5] ~= 'open') then
  return 'closed'
end
local nonce = ARGV[4] or ''
if nonce == '' and meta[6] then
  return 'challenge_required'
end
if nonce ~= '' then
  if not spend_nonce(KEYS[4], nonce, ARGV[5], now_ms) then
    return 'challenge_replayed'
  end
end

local entered = string.format('%d', now_ms)
-- The entry's id carries its time, unless the stream's last entry is later (the clock went back).
local id = redis.pcall('XADD', KEYS[3], entered .. '-*', 'user_id', user, 'sizes', sizes, 'quantity', quantity,
  'entered_at_ms', entered)
if type(id) == 'table' and id.err then
  id = redis.pcall('XADD', KEYS[3], '*', 'user_id', user, 'sizes', sizes, 'quantity', quantity,
    'entered_at_ms', entered)
end
-- A failure below gives the nonce back (the entry is not made: the same solution may be sent again).
local function failed(what, err)
  if nonce ~= '' then
    redis.call('ZREM', KEYS[4], nonce)
  end
  error('seckill lua/draw_enter.lua: the ' .. what .. ' is damaged (' .. err .. '): nothing written')
end
if type(id) == 'table' and id.err then
  failed('entry stream', id.err)
end
local kept = redis.pcall('HSET', KEYS[2], user, sizes .. ' ' .. quantity .. ' ' .. entered)
if type(kept) == 'table' and kept.err then
  redis.call('XDEL', KEYS[3], id)
  failed('entries hash', kept.err)
end
return {'entered', entered}
