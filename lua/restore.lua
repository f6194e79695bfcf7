-- restore.lua: put buyers that Postgres holds and Redis lost back into one shard of a sale, with
-- their receipts, and lower the shard's stock to match (reconciliation's repair after a loss).
--
-- KEYS[1]  stock counter      seckill:{sale:<id>}:stock
-- KEYS[2]  buyer set          seckill:{sale:<id>}:buyers
-- KEYS[3]  receipts hash      seckill:{sale:<id>}:receipts  (user id -> "<order id> <created_at_ms> <stream entry id>",
--                             then " <quantity>" when over 1, as lua/buy.lua keeps them)
-- KEYS[4]  released set       seckill:{sale:<id>}:released  (lua/release.lua)
-- KEYS[5]  sale meta hash     seckill:{sale:<id>}:meta  (extra_units, extra_released)
-- ARGV     quintuples: user id, order id, created_at_ms (Unix milliseconds), released ("1" for
--          an order Postgres holds as cancelled or expired, else "0"), units (the order's
--          quantity), of orders committed to Postgres; as many as fit one call (the caller sends
--          them in pages). Optionally "fit" first: a sharded sale's buyer (src/purchase/restore.rs)
--          whose live order's units the stock left cannot cover is left out, not added
--
-- Returns {restored, overdrawn, released}, and with "fit" a fourth figure, skipped:
--   restored   users added to the buyer set (users already in it are left alone: idempotent)
--   released   of those, orders put into the released set (released in Postgres, and neither their
--              take nor their release in this Redis: their units were in the stock already)
--   overdrawn  how far below 0 the stock would have gone: the stock is set to 0 instead, and
--              stock_initial = stock + SCARD(buyers) no longer holds; the caller reports it
--              (a sale re-seeded with less stock than Postgres has orders)
--   skipped    with "fit": users left out, neither buyers here nor covered by the stock left (the
--              caller tries the next shard of their visiting order)
--
-- Invariants kept: a restored buyer is refused a second purchase (SISMEMBER in buy.lua) and is told
-- its Postgres order on a repeat: the receipt names entry "0-0", older than any stream entry, so
-- buy.lua reads it as confirmed. Each restored buyer of a live order takes its units of stock; a
-- released order's buyer takes none and its order joins the released set, so a release still owed
-- for it finds the gate closed and does not add the units a second time. A released order already
-- in the released set of a sale not seeded again had its release reach this Redis after its
-- purchase's writes were lost (a failover, a partial loss: no hold then): its units were given back
-- to a stock that never lost them, so its buyer takes them, as for a live order. No release runs on a sale
-- the repair seeded again until it has restored it (lua/release.lua refuses while its meta is
-- marked restoring), so the stock it was seeded with has given none of these units back. The units
-- beyond one go to the meta's extra_units (and extra_released). A grouped sale's units held per
-- buyer are not touched: they are one key for all the group's sales, which the caller raises to
-- what Postgres holds over the group (lua/held_floor.lua), once, however many of its sales are
-- restored one after the other (adding each restored order's units here counted a sale's units
-- again for every other sale of the group repaired after it). So stock_initial = stock +
-- SCARD(buyers) + extra_units - SCARD(released) - extra_released holds across the loss and the
-- restore. The stock key must exist (the sale is seeded): a missing stock key is refused with an
-- error, nothing is written. Raises, with nothing written, when a key is of the wrong type or the
-- meta's extra_units or extra_released is not a canonical integer (damaged: HINCRBY would refuse
-- it after the page's first buyers were added).
--
-- Assembled, not run as it stands: the line "-- @canonical" below is followed by
-- lua/canonical.lua (crate::redis::lua splices it in; the example does it with sed).
--
-- Example:
--   sed -e '/^-- @canonical$/r lua/canonical.lua' lua/restore.lua > /tmp/seckill-restore.lua
--   redis-cli --eval /tmp/seckill-restore.lua 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:buyers' 'seckill:{sale:demo}:receipts' 'seckill:{sale:demo}:released' 'seckill:{sale:demo}:meta' , bob 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a70 1732363200000 0 1

-- @canonical

local stock = tonumber(redis.call('GET', KEYS[1]))
if not stock then
  return redis.error_reply('restore.lua: the sale has no stock key; seed it first')
end
-- Every check before the first write: Redis does not undo a script's writes, and a failure half
-- way through a page would leave buyers added whose units the stock never gave (the SET at the
-- end), which a later repair skips as known: the sale would sell them again over Postgres's
-- orders. So a key of the wrong type, or an extra_units or extra_released HINCRBY refuses (a
-- canonical integer of at most 18 characters), raises here with nothing written.
for i, kind in ipairs({'set', 'hash', 'set', 'hash'}) do
  local found = redis.call('TYPE', KEYS[i + 1]).ok
  if found ~= 'none' and found ~= kind then
    error('seckill lua/restore.lua: ' .. KEYS[i + 1] .. ' is a ' .. found .. ', not a ' .. kind .. ': nothing written')
  end
end
for _, raw in ipairs(redis.call('HMGET', KEYS[5], 'extra_units', 'extra_released')) do
  if raw and not canonical(raw, false) then
    error('seckill lua/restore.lua: a count of the sale is damaged (' .. raw .. '): nothing written')
  end
end

local fit = #ARGV % 5 == 1
if fit and ARGV[1] ~= 'fit' then
  return redis.error_reply('restore.lua: quintuples, or "fit" then quintuples')
end
local restored = 0
local taken = 0
local released = 0
local skipped = 0
-- A sale the repair seeded again (lua/seed.lua's hold): its stock is new, and no release has run
-- on it since (lua/release.lua refuses while it is held).
local reseeded = redis.call('HEXISTS', KEYS[5], 'restoring') == 1
for i = fit and 2 or 1, #ARGV, 5 do
  local user = ARGV[i]
  local units = tonumber(ARGV[i + 4])
  if fit and ARGV[i + 3] ~= '1' and units > stock - taken and redis.call('SISMEMBER', KEYS[2], user) == 0 then
    skipped = skipped + 1
  elseif redis.call('SADD', KEYS[2], user) == 1 then
    local receipt = ARGV[i + 1] .. ' ' .. ARGV[i + 2] .. ' 0-0'
    if units > 1 then
      receipt = receipt .. ' ' .. units
    end
    redis.call('HSET', KEYS[3], user, receipt)
    restored = restored + 1
    if units > 1 then
      redis.call('HINCRBY', KEYS[5], 'extra_units', units - 1)
    end
    local newly_released = ARGV[i + 3] == '1' and redis.call('SADD', KEYS[4], ARGV[i + 1]) == 1
    if newly_released then
      -- Released, and neither its take nor its release is in this Redis: the stock has its units.
      released = released + 1
      if units > 1 then
        redis.call('HINCRBY', KEYS[5], 'extra_released', units - 1)
      end
    elseif ARGV[i + 3] ~= '1' or not reseeded then
      -- A live order; or a released one whose release reached this stock (its id in the released
      -- set, its units given back) while its take was lost: the stock has its units once too many.
      -- (A released id a new stock finds in the set came from before the loss: nothing to take.)
      taken = taken + units
    end
  end
end

local left = stock - taken
local overdrawn = 0
if left < 0 then
  overdrawn = -left
  left = 0
end
redis.call('SET', KEYS[1], left)
if fit then
  return {restored, overdrawn, released, skipped}
end
return {restored, overdrawn, released}
