-- buy.lua: decide one purchase atomically and enqueue its order in the same call.
--
-- KEYS[1]  sale meta hash     seckill:{sale:<id>}:meta    (stock_initial, starts_at_ms, ends_at_ms, shards)
-- KEYS[2]  stock counter      seckill:{sale:<id>}:stock
-- KEYS[3]  buyer set          seckill:{sale:<id>}:buyers
-- KEYS[4]  order stream       seckill:{sale:<id>}:orders
-- KEYS[5]  receipts hash      seckill:{sale:<id>}:receipts  (user id -> "<order id> <created_at_ms> <stream entry id>")
-- ARGV[1]  sale id            (copied into the order; the app validated it)
-- ARGV[2]  user id            (kept as a string: never tonumber'd)
-- ARGV[3]  order id           (UUID v7 made by the app)
-- ARGV[4]  shards             how many shards the caller believes the sale has (1: unsharded;
--                             docs/stock-sharding.md). KEYS are then those of one shard.
--
-- Returns one status string, except for "already_purchased":
--   "ok"                 user added, stock decremented, order appended to the stream, receipt kept
--   "unknown_sale"       no meta or no stock key: the sale was never seeded
--   "wrong_shards"       the meta records another shard count than ARGV[4]: nothing is written,
--                        the caller reads the sale's layout and asks again
--   "not_started"        Redis TIME is before starts_at_ms
--   "ended"              Redis TIME is at or after ends_at_ms
--   {"already_purchased", order id, created_at_ms, "queued"|"confirmed"}
--                        the user is already in the buyer set: the order it was given, and
--                        "queued" while that order's entry is still in the stream (not yet
--                        committed to Postgres: the worker trims an entry only after its
--                        commit), else "confirmed". Just {"already_purchased"} for a buyer
--                        without a receipt (one restored from Postgres by hand, say).
--   "sold_out"           stock <= 0
--   an error (raised)    a key is damaged (the stock not an integer, the order stream or the
--                        receipts key of another type): nothing is written
--
-- Invariants kept: the duplicate check comes before any write; stock is refused at <= 0 so it
-- never goes negative; SADD, DECR and XADD happen together or not at all (every key is checked
-- before the first write, since Redis does not roll a failed script back), so every "ok" has its
-- order in the stream and a receipt, and stock_initial = stock + SCARD(buyers) always holds. The
-- receipt lets a retry after a lost 201 learn its order id without touching Postgres. All keys share the
-- sale's hash tag, so the script runs on Redis Cluster. Time comes from the Redis server, and is
-- checked before the stock: a shard answers "sold_out" only once it has started.
--
-- Example (after seed.lua below has created the sale):
--   redis-cli --eval lua/buy.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:buyers' 'seckill:{sale:demo}:orders' 'seckill:{sale:demo}:receipts' , demo alice 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69 1

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 'unknown_sale'
end
local stock_raw = redis.call('GET', KEYS[2])
if not stock_raw then
  return 'unknown_sale'
end

local meta = redis.call('HMGET', KEYS[1], 'starts_at_ms', 'ends_at_ms', 'shards')
if (tonumber(meta[3]) or 1) ~= tonumber(ARGV[4]) then
  return 'wrong_shards'
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local starts_at = tonumber(meta[1])
local ends_at = tonumber(meta[2])
if starts_at and now_ms < starts_at then
  return 'not_started'
end
if ends_at and now_ms >= ends_at then
  return 'ended'
end

if redis.call('SISMEMBER', KEYS[3], ARGV[2]) == 1 then
  local receipt = redis.call('HGET', KEYS[5], ARGV[2])
  if not receipt then
    return {'already_purchased'}
  end
  local order_id, created_at, entry = string.match(receipt, '^(%S+) (%S+) (%S+)$')
  local queued = #redis.call('XRANGE', KEYS[4], entry, entry) > 0
  return {'already_purchased', order_id, created_at, queued and 'queued' or 'confirmed'}
end
local stock = string.match(stock_raw, '^%-?%d+$') and tonumber(stock_raw)
if stock and stock <= 0 then
  return 'sold_out'
end

-- Every write below must succeed once the first has (a script is not rolled back): a stock that
-- DECR cannot take, or an order stream or receipts key of another type, fails the call first.
local stream_type = redis.call('TYPE', KEYS[4])['ok']
local receipts_type = redis.call('TYPE', KEYS[5])['ok']
if not stock or (stream_type ~= 'stream' and stream_type ~= 'none')
    or (receipts_type ~= 'hash' and receipts_type ~= 'none') then
  error('seckill buy.lua: a key of the sale is damaged (stock ' .. stock_raw .. ', orders a '
    .. stream_type .. ', receipts a ' .. receipts_type .. '): nothing written')
end

redis.call('SADD', KEYS[3], ARGV[2])
redis.call('DECR', KEYS[2])
local entry = redis.call('XADD', KEYS[4], '*',
  'order_id', ARGV[3], 'sale_id', ARGV[1], 'user_id', ARGV[2], 'created_at_ms', tostring(now_ms))
redis.call('HSET', KEYS[5], ARGV[2], ARGV[3] .. ' ' .. now_ms .. ' ' .. entry)
return 'ok'
