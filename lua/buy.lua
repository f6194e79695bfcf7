-- buy.lua: decide one purchase atomically and enqueue its order in the same call.
--
-- KEYS[1]  sale meta hash     seckill:{sale:<id>}:meta    (stock_initial, starts_at_ms, ends_at_ms, shards,
--                             payment_window_ms)
-- KEYS[2]  stock counter      seckill:{sale:<id>}:stock
-- KEYS[3]  buyer set          seckill:{sale:<id>}:buyers
-- KEYS[4]  order stream       seckill:{sale:<id>}:orders
-- KEYS[5]  receipts hash      seckill:{sale:<id>}:receipts  (user id -> "<order id> <created_at_ms> <stream entry id>")
-- KEYS[6]  queue's buyers     seckill:{sale:<id>}:queue:bought  (a queued sale's: user id -> place; lua/admit.lua
--                             counts the admitted places that were used)
-- ARGV[1]  sale id            (copied into the order; the app validated it)
-- ARGV[2]  user id            (kept as a string: never tonumber'd)
-- ARGV[3]  order id           (UUID v7 made by the app)
-- ARGV[4]  shards             how many shards the caller believes the sale has (1: unsharded;
--                             docs/stock-sharding.md). KEYS are then those of one shard.
-- ARGV[5]  place              in a queued sale (meta queue_rate): the buyer's place in line, from the
--                             admission token the app verified (src/admission/); "" without one
-- ARGV[6]  traceparent        the W3C trace context of the purchase, carried in its entry to the
--                             worker's span (src/telemetry/traces.rs); "" when traces are off
--
-- Returns one status string, except for "already_purchased" and "reserved":
--   "ok"                 user added, stock decremented, order appended to the stream (its entry:
--                        order_id and user_id; its id carries the time), receipt kept
--   {"reserved", pay_by_ms}
--                        the same, in a sale with a payment window (meta payment_window_ms): the
--                        order is a reservation to be paid by pay_by_ms = Redis time + the window,
--                        which its entry carries too (src/reservations/)
--   "unknown_sale"       no meta (no stock_initial in it) or no stock key: the sale was never seeded
--   "wrong_shards"       the meta records another shard count than ARGV[4]: nothing is written,
--                        the caller reads the sale's layout and asks again
--   "not_admitted"       a queued sale, and no place given: the caller has no admission token (before or
--                        after the start)
--   "not_started"        Redis TIME is before starts_at_ms
--   "ended"              Redis TIME is at or after ends_at_ms
--   {"already_purchased", order id, created_at_ms, "queued"|"confirmed"}
--                        the user is already in the buyer set: the order it was given, and
--                        "queued" while that order's entry is still in the stream (not yet
--                        committed to Postgres: the worker trims an entry only after its
--                        commit), else "confirmed". Just {"already_purchased"} for a buyer
--                        without a receipt (one restored from Postgres by hand, say).
--   "sold_out"           stock <= 0
--   an error (raised)    a key is damaged (the stock not a canonical integer of at most 18
--                        digits, the order stream or the receipts key of another type): nothing
--                        is written
--
-- Invariants kept: the duplicate check comes before any write; stock is refused at <= 0 so it
-- never goes negative; XADD, HSET, SADD and DECR happen together or not at all (Redis does not
-- roll a failed script back, so the writes are ordered such that only the first two can fail,
-- and a failed HSET deletes the entry the XADD just added), so every "ok" has its order in the
-- stream and a receipt (and, in a queued sale, its place in KEYS[6]), and stock_initial = stock + SCARD(buyers) - SCARD(released) always
-- holds (the released set is lua/release.lua's: units given back by cancelled or expired
-- reservations; a released buyer stays a buyer and cannot buy again in the sale). The
-- receipt lets a retry after a lost 201 learn its order id without touching Postgres. All keys share the
-- sale's hash tag, so the script runs on Redis Cluster. Time comes from the Redis server, and is
-- checked before the stock: a shard answers "sold_out" only once it has started.
--
-- Example (after seed.lua below has created the sale):
--   redis-cli --eval lua/buy.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:buyers' 'seckill:{sale:demo}:orders' 'seckill:{sale:demo}:receipts' 'seckill:{sale:demo}:queue:bought' , demo alice 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69 1 ''

local meta = redis.call('HMGET', KEYS[1], 'stock_initial', 'starts_at_ms', 'ends_at_ms', 'shards', 'payment_window_ms',
  'queue_rate')
local stock_raw = meta[1] and redis.call('GET', KEYS[2])
if not stock_raw then
  return 'unknown_sale'
end
if (tonumber(meta[4]) or 1) ~= tonumber(ARGV[4]) then
  return 'wrong_shards'
end

-- A queued sale refuses anyone without a place first, before or after its start alike.
local place = meta[6] and tonumber(ARGV[5])
if meta[6] and not place then
  return 'not_admitted'
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local starts_at = tonumber(meta[2])
local ends_at = tonumber(meta[3])
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
-- DECR takes only a canonical integer ("0", or no leading zero) of at most 18 characters here, so
-- it cannot fail below.
local canonical = stock_raw == '0' or (#stock_raw <= 18 and string.match(stock_raw, '^%-?[1-9]%d*$'))
local stock = canonical and tonumber(stock_raw)
if not stock then
  error('seckill buy.lua: the stock of the sale is damaged (' .. stock_raw .. '): nothing written')
end
if stock <= 0 then
  return 'sold_out'
end

-- A script is not rolled back, so the writes go in the order in which only the first three can
-- fail: XADD (the orders key of another type: nothing written yet), then HSET (the receipts key
-- of another type: the entry just added is deleted again), then a queued sale's ZADD (the
-- entry and the receipt deleted again). SADD cannot fail (SISMEMBER above
-- took the key), nor can DECR (the stock checked above).
local created_at = string.format('%d', now_ms)
local window = tonumber(meta[5])
local pay_by
if window then
  pay_by = string.format('%d', now_ms + window)
end
-- The entry's id carries the purchase's time ('<created_at>-*'), so its fields are the order id
-- and the buyer only (the sale is its stream's). Only when the stream's last entry is later (the
-- server's clock went back) does Redis choose the id, and the time goes in a field of its own;
-- any other error (the orders key of another type) is raised there, with nothing written.
local function append(...)
  local entry = redis.pcall('XADD', KEYS[4], created_at .. '-*', 'order_id', ARGV[3], 'user_id', ARGV[2], ...)
  if type(entry) == 'table' and entry.err then
    entry = redis.call('XADD', KEYS[4], '*', 'order_id', ARGV[3], 'user_id', ARGV[2], 'created_at_ms', created_at, ...)
  end
  return entry
end
local trace = ARGV[6] ~= nil and ARGV[6] ~= '' and ARGV[6]
local entry
if window and trace then
  entry = append('pay_by_ms', pay_by, 'traceparent', trace)
elseif window then
  entry = append('pay_by_ms', pay_by)
elseif trace then
  entry = append('traceparent', trace)
else
  entry = append()
end
local receipt = redis.pcall('HSET', KEYS[5], ARGV[2], ARGV[3] .. ' ' .. created_at .. ' ' .. entry)
if type(receipt) == 'table' and receipt.err then
  redis.call('XDEL', KEYS[4], entry)
  error('seckill buy.lua: the receipts key of the sale is damaged (' .. receipt.err .. '): nothing written')
end
if place then
  local used = redis.pcall('ZADD', KEYS[6], place, ARGV[2])
  if type(used) == 'table' and used.err then
    redis.call('XDEL', KEYS[4], entry)
    redis.call('HDEL', KEYS[5], ARGV[2])
    error('seckill buy.lua: the queue\'s buyers key of the sale is damaged (' .. used.err .. '): nothing written')
  end
end
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('DECR', KEYS[2])
if pay_by then
  return {'reserved', pay_by}
end
return 'ok'
