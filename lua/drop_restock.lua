-- drop_restock.lua: add units to several sizes of a drop, or take unsold ones back, in one call,
-- all or nothing (src/drops/).
--
-- KEYS[1]  group's sales      seckill:{group:<d>}:sales  (the ids of the drop's sizes)
-- KEYS[2]  line meta          seckill:{group:<d>}:line:meta (its stock_initial follows the total)
-- KEYS[3..] per size, 2 each  its meta and its stock counter
-- ARGV[1]  max stock          the largest stock_initial one size may reach
-- ARGV[2..] per size, 2 each  its sale id and the units added (> 0) or taken back (< 0), in KEYS' order
-- ARGV[last] change id        after the sizes, optional: unique per change (a UUID); a call whose id
--                             is the last drop change made (the first size's meta's drop_restock_op)
--                             is the same change sent again (a Redis Cluster client re-sends a call
--                             that timed out, which may have run): it answers "ok" with each size's
--                             figures now and writes nothing
--
-- Returns {"ok", stock_initial, stock_left, ...}: each size's figures after the call, in KEYS'
-- order. Or, with nothing written:
--   {"unknown_size", sale_id}               not a size of the drop (or its keys are gone)
--   {"below_zero", sale_id, stock_left}     it would take back more units than that size has unsold
--   {"too_much", sale_id, stock_initial}    that size's stock_initial would exceed ARGV[1]
--   {"restoring", sale_id}                  reconciliation's repair is restoring that size (its
--                                           meta's "restoring" mark): its stock is not yet the
--                                           stock left
-- Raises, with nothing written, when a size's stock_initial or stock, or the line meta's
-- stock_initial, is not a canonical integer (damaged: HINCRBY and INCRBY would refuse it).
--
-- Invariants kept: every check comes before any write; in each size stock_initial and the stock
-- move together, so stock_initial = stock + units sold - units released holds in every size, and a
-- purchase (one call too) sees all the sizes before or after, never between. A change is made
-- once however often its call is sent (its change id). Every key shares
-- {group:<d>}.
--
-- Assembled, not run as it stands: the line "-- @canonical" below is followed by
-- lua/canonical.lua (crate::redis::lua splices it in; the example does it with sed).
--
-- Example (after drop_seed.lua's example: 2 more of size 40, 1 fewer of size 41):
--   sed -e '/^-- @canonical$/r lua/canonical.lua' lua/drop_restock.lua > /tmp/seckill-drop-restock.lua
--   redis-cli --eval /tmp/seckill-drop-restock.lua 'seckill:{group:kicks}:sales' 'seckill:{group:kicks}:line:meta' 'seckill:{group:kicks}:sale:kicks.40:meta' 'seckill:{group:kicks}:sale:kicks.40:stock' 'seckill:{group:kicks}:sale:kicks.41:meta' 'seckill:{group:kicks}:sale:kicks.41:stock' , 10000000 kicks.40 2 kicks.41 -1 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a71

-- @canonical

local sizes = (#KEYS - 2) / 2
local max = tonumber(ARGV[1])
local change = ARGV[2 + 2 * sizes] or ''
if change ~= '' and sizes > 0 and redis.call('HGET', KEYS[3], 'drop_restock_op') == change then
  local figures = {'ok'}
  for i = 0, sizes - 1 do
    table.insert(figures, tonumber(redis.call('HGET', KEYS[3 + 2 * i], 'stock_initial')))
    table.insert(figures, tonumber(redis.call('GET', KEYS[4 + 2 * i])))
  end
  return figures
end
-- A figure HINCRBY or INCRBY takes: a canonical integer of at most 18 characters.
local function checked(raw)
  if raw and not canonical(raw, true) then
    error('seckill lua/drop_restock.lua: a stock figure of the drop is damaged (' .. raw .. '): nothing written')
  end
  return tonumber(raw)
end
checked(redis.call('HGET', KEYS[2], 'stock_initial'))
local total = 0
for i = 0, sizes - 1 do
  local sale, add = ARGV[2 + 2 * i], tonumber(ARGV[3 + 2 * i])
  if redis.call('SISMEMBER', KEYS[1], sale) == 0 then
    return {'unknown_size', sale}
  end
  local initial = checked(redis.call('HGET', KEYS[3 + 2 * i], 'stock_initial'))
  local stock = checked(redis.call('GET', KEYS[4 + 2 * i]))
  if not initial or not stock then
    return {'unknown_size', sale}
  end
  if redis.call('HEXISTS', KEYS[3 + 2 * i], 'restoring') == 1 then
    return {'restoring', sale}
  end
  if stock + add < 0 then
    return {'below_zero', sale, stock}
  end
  if initial + add > max then
    return {'too_much', sale, initial}
  end
  total = total + add
end
local figures = {'ok'}
for i = 0, sizes - 1 do
  local add = tonumber(ARGV[3 + 2 * i])
  table.insert(figures, redis.call('HINCRBY', KEYS[3 + 2 * i], 'stock_initial', add))
  table.insert(figures, redis.call('INCRBY', KEYS[4 + 2 * i], add))
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], 'stock_initial', total)
end
if change ~= '' and sizes > 0 then
  redis.call('HSET', KEYS[3], 'drop_restock_op', change)
end
return figures
