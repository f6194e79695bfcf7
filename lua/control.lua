-- control.lua: the kill switch of a sale (or of one shard of a sharded sale): pause it, resume it,
-- or end it now (src/controls/).
--
-- KEYS[1]  sale meta hash     seckill:{sale:<id>}:meta    (of a shard k >= 1: {sale:<id>:<suffix>})
-- ARGV[1]  action             "pause", "resume" or "end"
-- ARGV[2]  reason             the operator's reason for a pause, kept in the meta's "paused" field
--                             ("" for none; the app bounds its length)
-- ARGV[3]  the repair's hold  optional, resume only: lift the hold (lua/seed.lua's ARGV[16]: the
--                             meta's "restoring" mark), and resume only a pause whose reason is
--                             this (a pause an operator made meanwhile stays)
--
-- Returns {status, was_paused, ends_at_ms} (an action the app never sends: an error reply):
--   status       "ok"; or just "unknown_sale" (no meta: no stock_initial in it): nothing written
--   was_paused   1 if the sale was paused before this call, else 0
--   ends_at_ms   the sale's end after this call, Unix ms ("" for none)
--
-- pause   sets the meta's "paused" field to the reason: lua/purchase.lua refuses every purchase
--         with "paused" from the next call on (it reads the meta in the same HMGET as the rest),
--         lua/admit.lua admits nobody more; reservations and admissions keep their deadlines.
--         Pausing a paused sale replaces its reason.
-- resume  removes the field: the next purchase call sells again (with ARGV[3], only if it holds
--         that reason; and the restoring mark goes, whatever the reason).
-- end     sets ends_at_ms to Redis TIME now (an earlier end is kept), and starts_at_ms to before
--         that (1 ms: a sale ended before its start never opens; a start stays before its end, as
--         the sales table checks): purchases answer "ended".
--
-- Invariants kept: only the meta hash changes; the stock, the buyers and the order stream are not
-- touched, so stock_initial = stock + SCARD(buyers) - SCARD(released) holds. One key, in the sale's
-- slot, so the script runs on Redis Cluster.
--
-- Example (on a sale "drop", apart from the other scripts' "demo", which a pause would stop):
--   redis-cli --eval lua/control.lua 'seckill:{sale:drop}:meta' , pause 'price typo'

if not redis.call('HGET', KEYS[1], 'stock_initial') then
  return {'unknown_sale'}
end
local was_paused = redis.call('HEXISTS', KEYS[1], 'paused')
local action = ARGV[1]
if action == 'pause' then
  redis.call('HSET', KEYS[1], 'paused', ARGV[2])
elseif action == 'resume' then
  if not ARGV[3] or redis.call('HGET', KEYS[1], 'paused') == ARGV[3] then
    redis.call('HDEL', KEYS[1], 'paused')
  end
  if ARGV[3] then
    redis.call('HDEL', KEYS[1], 'restoring')
  end
elseif action == 'end' then
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ends_at = tonumber(redis.call('HGET', KEYS[1], 'ends_at_ms'))
  if not ends_at or ends_at > now_ms then
    ends_at = now_ms
    redis.call('HSET', KEYS[1], 'ends_at_ms', string.format('%d', ends_at))
  end
  local starts_at = tonumber(redis.call('HGET', KEYS[1], 'starts_at_ms'))
  if starts_at and starts_at >= ends_at then
    redis.call('HSET', KEYS[1], 'starts_at_ms', string.format('%d', ends_at - 1))
  end
else
  return redis.error_reply('seckill lua/control.lua: unknown action ' .. tostring(action))
end
return {'ok', was_paused, redis.call('HGET', KEYS[1], 'ends_at_ms') or ''}
