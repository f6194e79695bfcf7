-- restock.lua: add units to a sale's stock, or take unsold ones back, atomically with its
-- purchases (src/controls/).
--
-- KEYS[1]  sale meta hash     seckill:{sale:<id>}:meta    (stock_initial, shards)
-- KEYS[2]  stock counter      seckill:{sale:<id>}:stock
-- ARGV[1]  add                an integer, not 0: units added (> 0) or taken back (< 0)
-- ARGV[2]  max stock          the largest stock_initial the sale may reach
-- ARGV[3]  change id          unique per change (a UUID), optional: a call whose id is the last
--                             change made (the meta's restock_op) is the same change sent again (a
--                             Redis Cluster client re-sends a call that timed out, which may have
--                             run): it answers "ok" with the figures now and writes nothing
--
-- Returns {status, stock_initial, stock_left}, the figures after the call (before it, when
-- refused):
--   "ok"           stock_initial and the stock both moved by ARGV[1]
--   "below_zero"   ARGV[1] would take back more units than are left unsold: nothing written
--   "too_much"     stock_initial would exceed ARGV[2]: nothing written
--   "sharded"      the sale is split over shards (docs/stock-sharding.md): nothing written
--   "restoring"    reconciliation's repair is restoring the sale (its meta's "restoring" mark,
--                  lua/seed.lua's hold): its stock is not yet the stock left, nothing written
-- or just {"unknown_sale"} (no meta or no stock key): nothing written. Raises, with nothing written,
-- when stock_initial or the stock is not a canonical integer (damaged: HINCRBY and INCRBY would
-- refuse it).
--
-- Invariants kept: stock_initial and the stock move together in one call, so stock_initial =
-- stock + SCARD(buyers) - SCARD(released) holds before and after, and a purchase (lua/buy.lua,
-- one call too) sees the stock either before or after, never between. The stock never goes below
-- 0: only unsold units are taken back. A change is made once however often its call is sent
-- (ARGV[3]). Both keys share the sale's hash tag, so the script runs on Redis Cluster.
--
-- Assembled, not run as it stands: the line "-- @canonical" below is followed by
-- lua/canonical.lua (crate::redis::lua splices it in; the example does it with sed).
--
-- Example (after seed.lua's example, run on a sale "drop" instead of "demo"):
--   sed -e '/^-- @canonical$/r lua/canonical.lua' lua/restock.lua > /tmp/seckill-restock.lua
--   redis-cli --eval /tmp/seckill-restock.lua 'seckill:{sale:drop}:meta' 'seckill:{sale:drop}:stock' , 5 10000000 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a70

-- @canonical

local meta = redis.call('HMGET', KEYS[1], 'stock_initial', 'shards', 'restock_op', 'restoring')
local stock_raw = redis.call('GET', KEYS[2])
if not meta[1] or not stock_raw then
  return {'unknown_sale'}
end
for _, raw in ipairs({meta[1], stock_raw}) do
  if not canonical(raw, true) then
    error('seckill lua/restock.lua: a stock figure of the sale is damaged (' .. raw .. '): nothing written')
  end
end
local initial, stock = tonumber(meta[1]), tonumber(stock_raw)
local change = ARGV[3] or ''
if change ~= '' and meta[3] == change then
  return {'ok', initial, stock}
end
if (tonumber(meta[2]) or 1) > 1 then
  return {'sharded', initial, stock}
end
-- Until the repair has put its buyers back, the stock still counts their units as unsold.
if meta[4] then
  return {'restoring', initial, stock}
end
local add = tonumber(ARGV[1])
if stock + add < 0 then
  return {'below_zero', initial, stock}
end
if initial + add > tonumber(ARGV[2]) then
  return {'too_much', initial, stock}
end
local figures = {'ok', redis.call('HINCRBY', KEYS[1], 'stock_initial', add), redis.call('INCRBY', KEYS[2], add)}
-- Last: the change is recorded made only once it is.
if change ~= '' then
  redis.call('HSET', KEYS[1], 'restock_op', change)
end
return figures
