-- canonical.lua: the check of a figure a script will change with INCRBY, DECRBY or HINCRBY,
-- written once for lua/purchase.lua, lua/release.lua, lua/release_gate.lua, lua/restock.lua,
-- lua/drop_restock.lua and lua/restore.lua. Not a script: each has the line "-- @canonical"
-- where this file goes (crate::redis::lua splices it in, once per script however many of its
-- pieces name it; their examples do it with sed).
--
-- Defines:
--   canonical(raw, signed)
--               true when the string raw is "0" or an integer of at most 18 characters without a
--               leading zero ("-" first allowed when signed is true), which is what those
--               increments take here without failing; false for anything else ("007", "-0", "5.0",
--               " 5", 19 digits: a damaged key). Redis does not undo a script's writes, so an
--               includer checks each such figure before its first write and raises, with nothing
--               written, on one that is not canonical.
local function canonical(raw, signed)
  return raw == '0' or (#raw <= 18 and string.match(raw, signed and '^%-?[1-9]%d*$' or '^[1-9]%d*$') ~= nil)
end
