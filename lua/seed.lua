-- seed.lua: create or re-seed a sale (or one shard of a sharded sale), unless somebody has
-- already bought in it.
--
-- KEYS[1]  sale meta hash     seckill:{sale:<id>}:meta    (of a shard k >= 1: {sale:<id>:<suffix>})
-- KEYS[2]  stock counter      seckill:{sale:<id>}:stock
-- KEYS[3]  buyer set          seckill:{sale:<id>}:buyers
-- KEYS[4]  queue state        seckill:{sale:<id>}:queue:state (a queued sale's: its shuffle seed, lua/admit.lua's state)
-- KEYS[5]  group meta         seckill:{group:<g>}:meta  (a grouped sale's: the group's per_buyer and
--                             payment_window_ms, "" for none; a sale without a
--                             group passes its own seckill:{sale:<id>}:group, never touched)
-- KEYS[6]  group's sales      seckill:{group:<g>}:sales (the ids of the group's sales; likewise)
-- ARGV[1]  stock              (integer >= 0; the app validated its bounds)
-- ARGV[2]  starts_at_ms       (Unix epoch milliseconds, or "" for "open now")
-- ARGV[3]  ends_at_ms         (Unix epoch milliseconds, or "" for "never ends")
-- ARGV[4]  shards             K, the number of shards of the sale (1: unsharded)
-- ARGV[5]  shard suffixes     on shard 0 of a sharded sale (the sale's own keys): the other
--                             shards' suffixes, comma-separated, for every instance to read; else ""
-- ARGV[6]  re-seed            "1" when the sale exists already, else "0"
-- ARGV[7]  payment window     milliseconds a reservation has to be paid (buy.lua, release.lua),
--                             or "" for none: orders are final at once
-- ARGV[8]  queue opens at     a queued sale (src/admission/): when its pre-queue opens, Unix ms, before
--                             starts_at_ms; "" for a sale without a waiting room (ARGV[9..11] then "")
-- ARGV[9]  queue rate         buyers admitted per second
-- ARGV[10] admission ttl      milliseconds an admitted buyer has to buy
-- ARGV[11] shuffle seed       64 hex digits the app drew at random; kept if the queue has one already
--                             (a re-seed before the start must not reshuffle the pre-queue); the
--                             seed kept is copied to the meta hash (queue_seed), where the app reads it
-- ARGV[12] per_buyer          units one buyer may buy in the sale, or across its group's sales (1-100);
--                             "" or "1": one (the meta then records none, unless grouped)
-- ARGV[13] group              the group's name (src/domain.rs: the sale id's part before its '.'), or ""
-- ARGV[14] sale id            (joins the group's sales)
-- ARGV[15] challenge cost     the proof of work a buyer solves to join or buy (src/challenge/): the tries
--                             a solve takes on average; "" or absent: none (the meta then records none)
-- ARGV[16] hold               optional: seed the sale paused, with this reason in the meta's "paused"
--                             field, and marked "restoring" (reconciliation's repair of a lost sale,
--                             until its buyers are back: lua/purchase.lua refuses purchases and
--                             lua/release.lua releases while the mark is there, whatever an
--                             operator resumes; lua/control.lua's resume with the hold lifts both);
--                             "" or absent: neither
--
-- Returns one status string:
--   "ok"                 seeded
--   "sale_in_progress"   the buyer set is not empty; nothing is changed
--   "sale_started"       a re-seed (ARGV[6]) of a shard of a sharded sale (ARGV[4] > 1) that has
--                        started (Redis TIME at or after its starts_at_ms, or none); nothing is changed
--   {"group_limit_differs", per_buyer}
--                        the group exists with another per_buyer (its first seed's); nothing is changed
--   {"drop_size", sale_id}
--                        the group is a drop (lua/drop_seed.lua seeds its sizes together); nothing is changed
--   {"group_window_differs", payment_window_ms}
--                        the group's other sales have another payment window ARGV[7] ("" for none);
--                        nothing is changed
--
-- Invariants kept: a re-seed never resets stock under existing buyers, so stock_initial =
-- stock + SCARD(buyers) holds across re-seeds. Every sale of a group records the group's one
-- per_buyer, which lua/buy.lua reads from the sale's meta (no extra key on a purchase), and the
-- group's sales share one payment window (a sale alone in its group may change it). A queued sale's seed is drawn once: its SHA-256 is
-- public from the first seed on, so it never changes (HSETNX). A started shard of a sharded sale is never
-- re-seeded: it may have answered "sold_out", and a user who then fell over to another shard
-- could buy a second time if its stock rose again (docs/stock-sharding.md). The order stream is
-- not touched: its consumer group is created by the caller before the seed (and again by the
-- worker if it is lost), from the stream's first entry, so the worker sees every order
-- (src/redis/order_stream.rs).
--
-- Example:
--   redis-cli --eval lua/seed.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:buyers' 'seckill:{sale:demo}:queue:state' 'seckill:{sale:demo}:group' 'seckill:{sale:demo}:group:sales' , 100 '' '' 1 '' 0 '' '' '' '' '' '' '' demo ''

if redis.call('SCARD', KEYS[3]) > 0 then
  return 'sale_in_progress'
end

local group = ARGV[13] or ''
local per_buyer = tonumber(ARGV[12]) or 1
if group ~= '' then
  if redis.call('HGET', KEYS[5], 'drop') == '1' then
    return {'drop_size', ARGV[14]}
  end
  local fixed = redis.call('HGET', KEYS[5], 'per_buyer')
  if fixed and tonumber(fixed) ~= per_buyer then
    return {'group_limit_differs', fixed}
  end
  local window = redis.call('HGET', KEYS[5], 'payment_window_ms')
  local others = redis.call('SCARD', KEYS[6]) - redis.call('SISMEMBER', KEYS[6], ARGV[14])
  if window and others > 0 and window ~= ARGV[7] then
    return {'group_window_differs', window}
  end
end

local shards = tonumber(ARGV[4])
if ARGV[6] == '1' and shards > 1 and redis.call('EXISTS', KEYS[1]) == 1 then
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local starts_at = tonumber(redis.call('HGET', KEYS[1], 'starts_at_ms'))
  if not starts_at or starts_at <= now_ms then
    return 'sale_started'
  end
end

local stock = tonumber(ARGV[1])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'stock_initial', stock, 'shards', shards)
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'starts_at_ms', ARGV[2])
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'ends_at_ms', ARGV[3])
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'shard_suffixes', ARGV[5])
end
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[1], 'payment_window_ms', ARGV[7])
end
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'queue_opens_at_ms', ARGV[8], 'queue_rate', ARGV[9], 'queue_ttl_ms', ARGV[10])
  redis.call('HSETNX', KEYS[4], 'seed', ARGV[11])
  -- The state's epoch: new only when the state starts from nothing (lua/admit.lua's ticket binding).
  local t = redis.call('TIME')
  redis.call('HSETNX', KEYS[4], 'epoch', t[1] .. string.format('%06d', tonumber(t[2])))
  redis.call('HSET', KEYS[1], 'queue_seed', redis.call('HGET', KEYS[4], 'seed'))
end
if group ~= '' then
  redis.call('HSET', KEYS[5], 'per_buyer', per_buyer, 'payment_window_ms', ARGV[7])
  redis.call('SADD', KEYS[6], ARGV[14])
  redis.call('HSET', KEYS[1], 'per_buyer', per_buyer, 'group', group)
elseif per_buyer > 1 then
  redis.call('HSET', KEYS[1], 'per_buyer', per_buyer)
end
if ARGV[15] and ARGV[15] ~= '' then
  redis.call('HSET', KEYS[1], 'challenge_cost', ARGV[15])
end
if ARGV[16] and ARGV[16] ~= '' then
  redis.call('HSET', KEYS[1], 'paused', ARGV[16], 'restoring', '1')
end
redis.call('SET', KEYS[2], stock)
return 'ok'
