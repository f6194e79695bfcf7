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
--   "paused"             the meta has a "paused" field (lua/control.lua): nothing is written; a buyer
--                        who bought before still hears already_purchased
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
-- Assembled, not run as it stands: the line "-- @purchase" below is followed by lua/purchase.lua,
-- the purchase's rules, which lua/buy_batch.lua shares (crate::redis::lua::BUY; the example does
-- it with sed). This file is the call of one purchase: the rules are purchase.lua's.
--
-- Example (after seed.lua below has created the sale):
--   sed -e '/^-- @purchase$/r lua/purchase.lua' lua/buy.lua > /tmp/seckill-buy.lua
--   redis-cli --eval /tmp/seckill-buy.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:buyers' 'seckill:{sale:demo}:orders' 'seckill:{sale:demo}:receipts' 'seckill:{sale:demo}:queue:bought' , demo alice 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69 1 ''

local shards = ARGV[4]
-- @purchase

local reply = buy(ARGV[2], ARGV[3], ARGV[5], ARGV[6] or '')
-- The stock goes last, once the purchase wrote all else (DECR cannot fail: purchase.lua checked it).
if sold > 0 then
  redis.call('DECR', KEYS[2])
end
return reply
