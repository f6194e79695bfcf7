-- release.lua: give the units of cancelled or expired reservations back to a sale's stock,
-- each exactly once.
--
-- KEYS[1]  stock counter      seckill:{sale:<id>}:stock
-- KEYS[2]  released set       seckill:{sale:<id>}:released  (order ids whose units went back)
-- KEYS[3]  sale meta hash     seckill:{sale:<id>}:meta  (extra_released: units released beyond one per order)
-- ARGV     pairs: order id, units (its quantity, 1-100), of orders Postgres moved from 'reserved'
--          to 'cancelled' or 'expired' (src/reservations/store.rs); as many as fit one call
--
-- Returns {released, stock_before, units}:
--   released      how many of the orders were not released before
--   units         their units: the stock rose by as many
--   stock_before  the stock before this call (the caller announces a sale that was sold out and
--                 now has stock again, so every instance drops its sold-out flag)
-- Or "unknown_sale" when the stock key is missing (Redis lost the sale, or it was retired), or
-- while the repair restores the sale (its meta's "restoring" mark, lua/seed.lua's hold): nothing
-- is written; the release stays owed in Postgres until reconciliation has restored the sale.
--
-- Invariants kept: the released set is the gate. SADD answers 1 only to the first call that
-- names an order, and only then does the stock rise, so a release repeated by a second sweeper,
-- by the re-drive after a crash, or by a retry after a lost reply returns its unit once. The
-- buyer stays in the buyer set (one order per user per sale; buy.lua answers already_purchased),
-- and in a grouped sale keeps the units it took of the group's limit, so stock_initial = stock +
-- SCARD(buyers) + extra_units - SCARD(released) - extra_released holds before and after. The keys
-- share the sale's hash tag, so the script runs on Redis Cluster.
--
-- Assembled, not run as it stands: the line "-- @canonical" below is followed by
-- lua/canonical.lua, the line "-- @release_gate" by lua/release_gate.lua (which names
-- lua/canonical.lua too: spliced once, though the example's sed puts it in twice).
--
-- Example:
--   sed -e '/^-- @release_gate$/r lua/release_gate.lua' lua/release.lua | sed -e '/^-- @canonical$/r lua/canonical.lua' > /tmp/seckill-release.lua
--   redis-cli --eval /tmp/seckill-release.lua 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:released' 'seckill:{sale:demo}:meta' , 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69 1

-- @canonical
-- @release_gate

local stock_raw = redis.call('GET', KEYS[1])
if not stock_raw then
  return 'unknown_sale'
end
-- INCRBY takes only a canonical integer ("0", or no leading zero) of at most 18 characters here;
-- any other stock is damaged, found before the gate counts an order released.
if not canonical(stock_raw, true) then
  error('seckill release.lua: the stock of the sale is damaged (' .. stock_raw .. '): nothing written')
end
local stock = tonumber(stock_raw)
-- A sale the repair is restoring (lua/seed.lua's hold) gives nothing back yet: its buyers, and
-- which of their orders are released, are being put back; the release stays owed.
if redis.call('HEXISTS', KEYS[3], 'restoring') == 1 then
  return 'unknown_sale'
end
local released, units = give_back(KEYS[2], KEYS[3], 1)
if units > 0 then
  redis.call('INCRBY', KEYS[1], units)
end
return {released, stock, units}
