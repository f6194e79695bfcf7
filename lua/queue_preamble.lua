-- queue_preamble.lua: the opening lua/queue_join.lua and lua/admit.lua share, written once. Not a
-- script: each has the line "-- @queue_preamble" where this file goes (crate::redis::lua splices
-- it in; each one's example does it with sed).
--
-- Reads KEYS[1], the sale's meta hash (the including script's KEYS[1]).
-- Returns, ending the including script, "unknown_sale" (no meta: no stock_initial in it) or
-- "not_queued" (no queue_rate: the sale has no waiting room).
-- Defines:
--   meta    the meta's stock_initial, starts_at_ms, ends_at_ms, queue_rate, queue_ttl_ms,
--           queue_opens_at_ms (1..6), each a string or false
--   now_ms  Redis TIME in milliseconds
local meta = redis.call('HMGET', KEYS[1], 'stock_initial', 'starts_at_ms', 'ends_at_ms', 'queue_rate', 'queue_ttl_ms',
  'queue_opens_at_ms')
if not meta[1] then
  return 'unknown_sale'
end
if not meta[4] then
  return 'not_queued'
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
