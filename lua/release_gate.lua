-- release_gate.lua: the release's gate, written once for lua/release.lua and lua/draw_release.lua.
-- Not a script: each has the line "-- @release_gate" where this file goes (crate::redis::lua
-- splices it in; their examples do it with sed). The line "-- @canonical" below is followed by
-- lua/canonical.lua.
--
-- Defines:
--   give_back(released_key, meta_key, from)
--               for each pair (order id, units 1-100) of ARGV from ARGV[from] on: SADD of the order
--               id to the released set released_key; only an order that SADD answers 1 for (never
--               released before) counts. Adds the counted units beyond one per order to the
--               extra_released of the sale's meta hash meta_key, and returns the counted orders
--               and their units. The includer puts the units back (in the stock, or to the
--               waitlist): the gate is what makes that happen once per order, however often the
--               release is repeated. Raises, with nothing written, when the meta's extra_released
--               is not a canonical integer (HINCRBY would refuse it after the SADDs had counted
--               the orders released, their units lost).
-- @canonical
local function give_back(released_key, meta_key, from)
  local extra = redis.call('HGET', meta_key, 'extra_released')
  if extra and not canonical(extra, false) then
    error('seckill lua/release_gate.lua: the extra_released of the sale is damaged (' .. extra .. '): nothing written')
  end
  local released, units = 0, 0
  for i = from, #ARGV, 2 do
    if redis.call('SADD', released_key, ARGV[i]) == 1 then
      released = released + 1
      units = units + tonumber(ARGV[i + 1])
    end
  end
  if units > released then
    redis.call('HINCRBY', meta_key, 'extra_released', units - released)
  end
  return released, units
end
