-- drop_seed.lua: seed or update a whole drop (src/drops/): every size (a sale of the drop's group,
-- `<drop>.<size>`), the group's keys and the drop's line, in one call, unless somebody has
-- bought in it. Per size it writes what lua/seed.lua writes for an unsharded sale of a group.
-- In "restore" mode (reconciliation's repair after a Redis loss, src/reconcile.rs) it writes the
-- same, from the drop's Postgres rows, but only what Redis lost: a size whose meta is gone (its
-- stock only if gone too: 0 when its buyers are not), the group meta's fields, and the line's or
-- the draw's meta if gone; it checks nothing and resets no live key. A drop in draw mode (issue
-- 53) has no line: its draw meta holds the entry window.
--
-- KEYS[1]  group meta         seckill:{group:<d>}:meta   (per_buyer, payment_window_ms, drop = "1")
-- KEYS[2]  group's sales      seckill:{group:<d>}:sales  (the ids of the drop's sizes)
-- KEYS[3]  line meta          seckill:{group:<d>}:line:meta (the drop's waiting room, src/admission/)
-- KEYS[4]  line state         seckill:{group:<d>}:line:queue:state (its shuffle seed)
-- KEYS[5]  draw meta          seckill:{group:<d>}:draw (opens_at_ms, closes_at_ms, per_buyer, sizes, commitment,
--                             waitlist, state, challenge_cost; lua/draw_enter.lua reads it)
-- KEYS[6..] per size, 3 each  its meta, stock and buyer set (seckill:{group:<d>}:sale:<d>.<size>:meta, ...)
-- ARGV[1]  drop id
-- ARGV[2]  starts_at_ms       Unix ms, or "" for "open now"
-- ARGV[3]  ends_at_ms         Unix ms, or "" for "never ends"
-- ARGV[4]  payment window     ms, or "" for none
-- ARGV[5]  per_buyer          units one buyer may buy across the drop's sizes (1-100)
-- ARGV[6]  challenge cost     the proof of work's average tries (on the line's meta with a line, else on
--                             each size's), or "" for none
-- ARGV[7]  line opens at      Unix ms the line opens (before starts_at_ms), or "" for a drop without a
--                             line (ARGV[8..10] then "")
-- ARGV[8]  line rate          buyers admitted per second
-- ARGV[9]  admission ttl      ms an admitted buyer has to buy
-- ARGV[10] shuffle seed       64 hex digits; kept if the line has one already (as lua/seed.lua)
-- ARGV[11] mode               "seed", or "restore"
-- ARGV[12] line's stock       the line meta's stock_initial (the drop's stock, all sizes)
-- ARGV[13] draw opens at      Unix ms entries open, or "" for a drop not in draw mode (ARGV[14..16] then "")
-- ARGV[14] draw closes at     Unix ms entries close
-- ARGV[15] commitment         SHA-256 of the draw's secret seed, hex (the seed itself never reaches Redis)
-- ARGV[16] waitlist           places on the draw's waitlist
-- ARGV[17..] per size, 2 each its sale id and its stock (integer >= 0), in KEYS' order
-- then, optional, in "restore" mode: the hold, a reason a size written back is paused with, and
--                             marked "restoring", while the repair restores its buyers (lua/seed.lua's
--                             ARGV[16]); the drop's own pause, if its line's meta still holds one, is
--                             the reason instead
-- then, optional, in "restore" mode: the draw's state as Postgres records it ("open", "drawing",
--                             "drawn"), for a draw meta written back ("" or absent: "open")
--
-- Returns, in "restore" mode, the number of sizes written again (0: Redis had them all). In
-- "seed" mode, "ok" when seeded, or, with nothing changed:
--   {"not_a_drop"}               the group has sales seeded one by one (PUT /admin/sales), not as a drop
--   {"size_missing", sale_id}    a size of the drop is not in the call: a drop's size is never removed
--   {"drop_in_progress", sale_id} that size has buyers: a drop with buyers is not re-seeded
--
-- Invariants kept: all checks come before any write; a re-seed never resets a stock under buyers
-- (no size has any), so stock_initial = stock + SCARD(buyers) holds in every size; every size records
-- the group's one per_buyer and payment window; the line's shuffle seed is drawn once (HSETNX). With
-- a line, each size's meta has queue_rate (lua/purchase.lua asks an admission) and line = "drop";
-- without one, the line's meta is removed (nobody can join). In draw mode each size's meta has
-- line = "draw" (lua/purchase.lua refuses every purchase: draw_only) and the draw meta is written
-- (its state kept); without it the draw meta is removed (nobody can enter). A restore never opens a size wider
-- than its seed did: a size comes back with queue_rate and line = "drop" (line = "draw"), the group with drop = "1"
-- and its per_buyer, the line with its seed (kept if Redis still has one), paused if the line's
-- meta Redis kept is; a size's buyers are restored next by lua/restore.lua. Every key shares {group:<d>}.
--
-- Example (a drop "kicks" of sizes 40 and 41, 3 pairs each, at most 2 per buyer, open now):
--   redis-cli --eval lua/drop_seed.lua 'seckill:{group:kicks}:meta' 'seckill:{group:kicks}:sales' 'seckill:{group:kicks}:line:meta' 'seckill:{group:kicks}:line:queue:state' 'seckill:{group:kicks}:draw' 'seckill:{group:kicks}:sale:kicks.40:meta' 'seckill:{group:kicks}:sale:kicks.40:stock' 'seckill:{group:kicks}:sale:kicks.40:buyers' 'seckill:{group:kicks}:sale:kicks.41:meta' 'seckill:{group:kicks}:sale:kicks.41:stock' 'seckill:{group:kicks}:sale:kicks.41:buyers' , kicks '' '' '' 2 '' '' '' '' '' seed 6 '' '' '' '' kicks.40 3 kicks.41 3

local sizes = (#KEYS - 5) / 3
local restore = ARGV[11] == 'restore'
if not restore then
  local listed = {}
  for i = 0, sizes - 1 do
    listed[ARGV[17 + 2 * i]] = true
  end
  if redis.call('HGET', KEYS[1], 'drop') ~= '1' and redis.call('SCARD', KEYS[2]) > 0 then
    return {'not_a_drop'}
  end
  for _, sale in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    if not listed[sale] then
      return {'size_missing', sale}
    end
  end
  for i = 0, sizes - 1 do
    if redis.call('SCARD', KEYS[8 + 3 * i]) > 0 then
      return {'drop_in_progress', ARGV[17 + 2 * i]}
    end
  end
end

local line = ARGV[7] ~= ''
local draw = ARGV[13] ~= ''
local written = 0
-- A size written back while the rest of the drop is paused comes back paused (the line's meta
-- holds the drop's pause too; a drop that lost it, or has no line, comes back as a sale does),
-- else held by the repair if it asks.
local hold = ARGV[17 + 2 * sizes]
local paused = restore and ((line and redis.call('HGET', KEYS[3], 'paused')) or (hold ~= '' and hold))
for i = 0, sizes - 1 do
  local meta, stock, buyers, sale = KEYS[6 + 3 * i], KEYS[7 + 3 * i], KEYS[8 + 3 * i], ARGV[17 + 2 * i]
  local units = tonumber(ARGV[18 + 2 * i])
  if not (restore and redis.call('EXISTS', meta) == 1) then
    written = written + 1
    redis.call('DEL', meta)
    redis.call('HSET', meta, 'stock_initial', units, 'shards', 1, 'per_buyer', ARGV[5], 'group', ARGV[1])
    if ARGV[2] ~= '' then redis.call('HSET', meta, 'starts_at_ms', ARGV[2]) end
    if ARGV[3] ~= '' then redis.call('HSET', meta, 'ends_at_ms', ARGV[3]) end
    if ARGV[4] ~= '' then redis.call('HSET', meta, 'payment_window_ms', ARGV[4]) end
    if line then
      redis.call('HSET', meta, 'queue_rate', ARGV[8], 'line', 'drop')
    elseif draw then
      redis.call('HSET', meta, 'line', 'draw')
    elseif ARGV[6] ~= '' then
      redis.call('HSET', meta, 'challenge_cost', ARGV[6])
    end
    if paused then redis.call('HSET', meta, 'paused', paused) end
    if restore and hold and hold ~= '' then redis.call('HSET', meta, 'restoring', '1') end
    if not restore or redis.call('EXISTS', stock) == 0 then
      -- A restore keeps a stock that outlived its meta (it counts what its buyers took); one lost
      -- while buyers remain is not known: 0, never the whole stock under them (reconciliation
      -- then reports it unbalanced, for an operator's restock).
      redis.call('SET', stock, (restore and redis.call('SCARD', buyers) > 0) and 0 or units)
    end
  end
  redis.call('SADD', KEYS[2], sale)
end
redis.call('HSET', KEYS[1], 'per_buyer', ARGV[5], 'payment_window_ms', ARGV[4], 'drop', '1')

if not (restore and redis.call('EXISTS', KEYS[5]) == 1) then
  local kept = ARGV[18 + 2 * sizes]
  local state = redis.call('HGET', KEYS[5], 'state') or (restore and kept and kept ~= '' and kept) or 'open'
  redis.call('DEL', KEYS[5])
  if draw then
    local names = {} -- every size's short name (a restore names one size: the group's set has all)
    for _, sale in ipairs(redis.call('SMEMBERS', KEYS[2])) do
      names[#names + 1] = string.sub(sale, #ARGV[1] + 2)
    end
    table.sort(names)
    redis.call('HSET', KEYS[5], 'opens_at_ms', ARGV[13], 'closes_at_ms', ARGV[14], 'per_buyer', ARGV[5],
      'sizes', table.concat(names, ','), 'commitment', ARGV[15], 'waitlist', ARGV[16], 'state', state)
    if ARGV[6] ~= '' then redis.call('HSET', KEYS[5], 'challenge_cost', ARGV[6]) end
  end
end

if restore and (not line or redis.call('EXISTS', KEYS[3]) == 1) then
  return written
end
redis.call('DEL', KEYS[3])
if line then
  redis.call('HSET', KEYS[3], 'stock_initial', ARGV[12], 'queue_opens_at_ms', ARGV[7], 'queue_rate', ARGV[8],
    'queue_ttl_ms', ARGV[9])
  if ARGV[2] ~= '' then redis.call('HSET', KEYS[3], 'starts_at_ms', ARGV[2]) end
  if ARGV[3] ~= '' then redis.call('HSET', KEYS[3], 'ends_at_ms', ARGV[3]) end
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[3], 'challenge_cost', ARGV[6]) end
  redis.call('HSETNX', KEYS[4], 'seed', ARGV[10])
  -- The state's epoch: new only when the state starts from nothing (lua/admit.lua's ticket binding).
  local t = redis.call('TIME')
  redis.call('HSETNX', KEYS[4], 'epoch', t[1] .. string.format('%06d', tonumber(t[2])))
  redis.call('HSET', KEYS[3], 'queue_seed', redis.call('HGET', KEYS[4], 'seed'))
end
if restore then
  return written
end
return 'ok'
