-- seed.lua: create or re-seed a sale, unless somebody has already bought in it.
--
-- KEYS[1]  sale meta hash     seckill:{sale:<id>}:meta
-- KEYS[2]  stock counter      seckill:{sale:<id>}:stock
-- KEYS[3]  buyer set          seckill:{sale:<id>}:buyers
-- KEYS[4]  order stream       seckill:{sale:<id>}:orders
-- ARGV[1]  stock              (integer >= 0; the app validated its bounds)
-- ARGV[2]  starts_at_ms       (Unix epoch milliseconds, or "" for "open now")
-- ARGV[3]  ends_at_ms         (Unix epoch milliseconds, or "" for "never ends")
-- ARGV[4]  consumer group     (created on the stream, from id 0, if missing)
--
-- Returns "ok", or "sale_in_progress" when the buyer set is not empty (nothing is changed then).
--
-- Invariant kept: a re-seed never resets stock under existing buyers, so stock_initial =
-- stock + SCARD(buyers) holds across re-seeds. The consumer group exists before the first order
-- is appended, so the worker sees every order.
--
-- Example:
--   redis-cli --eval lua/seed.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:buyers' 'seckill:{sale:demo}:orders' , 100 '' '' seckill-workers

if redis.call('SCARD', KEYS[3]) > 0 then
  return 'sale_in_progress'
end

local stock = tonumber(ARGV[1])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'stock_initial', stock)
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'starts_at_ms', ARGV[2])
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'ends_at_ms', ARGV[3])
end
redis.call('SET', KEYS[2], stock)

local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[4], ARGV[4], '0', 'MKSTREAM')
if not ok and not string.find(tostring(err), 'BUSYGROUP') then
  return redis.error_reply(tostring(err))
end
return 'ok'
