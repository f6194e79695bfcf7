-- buy_limited.lua: the rate limits and the purchase in one call. The client's limit, then the
-- buyer's (if given), then buy.lua, atomically: one round trip for an admitted purchase.
--
-- Assembled, not run as it stands: the line "-- @limiter" below is followed by one limiter
-- script (lua/<algorithm>.lua, the same for both limits), the line "-- @buy" by lua/buy.lua, and
-- the lines those name in turn by their pieces (lua/limiter_preamble.lua, lua/purchase.lua, and its
-- lua/canonical.lua).
-- The app assembles it once per algorithm (crate::redis::lua::buy_limited); the example does it
-- with sed. Each part runs as a function with its own KEYS and ARGV, so its contract is its own
-- file's.
--
-- KEYS[1..7]    buy.lua's KEYS: the sale's keys (one shard's, for a sharded sale)
-- KEYS[8]       the client's limiter key, when ARGV[9] >= 1
-- KEYS[9]       the buyer's limiter key, when ARGV[9] = 2
-- ARGV[1..8]    buy.lua's ARGV: sale id, user id, order id, shards, place, traceparent, quantity, proven
-- ARGV[9]       how many limits to check first: 0, 1 (the client's) or 2 (the client's, then the buyer's)
-- ARGV[10..14]  the client's limiter ARGV: limit, window_ms, burst, nonce, now_us ("" = Redis TIME)
-- ARGV[15..19]  the buyer's limiter ARGV, likewise
--
-- Returns {client, buyer, purchase}:
--   client, buyer  each limit's reply {allowed, remaining, retry_after_us, reset_us}, or 0 when
--                  it was not checked (not asked, or the client's limit refused first)
--   purchase       buy.lua's reply, or 0 when a limit refused: then nothing is bought
--
-- Invariants kept: a refusing limit writes nothing and stops the call, so a refused request
-- never reaches the purchase, unless the buyer's receipt names this call's order id: the call was
-- sent again (a Redis Cluster client re-sends one that timed out) and its first run bought, so the
-- purchase answers already_purchased with that order, not the refusal of the limits run again.
-- An admitting limit records the request whatever the purchase then answers, exactly as two
-- separate calls would. The purchase keeps every invariant of buy.lua.
-- On a Redis Cluster every key must share one slot: the limiter keys then carry the sale's hash
-- tag (SECKILL_RATE_LIMIT_SCOPE=sale); otherwise the app checks the limits in calls of their own.
--
-- Example (gcra, 20 per second per client, then lua/buy.lua's purchase, by carol): assemble, then run
--   sed -e '/^-- @limiter$/r lua/gcra.lua' -e '/^-- @buy$/r lua/buy.lua' lua/buy_limited.lua | sed -e '/^-- @limiter_preamble$/r lua/limiter_preamble.lua' -e '/^-- @purchase$/r lua/purchase.lua' | sed -e '/^-- @canonical$/r lua/canonical.lua' > /tmp/seckill-buy-limited.lua
--   redis-cli --eval /tmp/seckill-buy-limited.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:buyers' 'seckill:{sale:demo}:orders' 'seckill:{sale:demo}:receipts' 'seckill:{sale:demo}:queue:bought' 'seckill:{sale:demo}:held' 'seckill:{sale:demo}:ratelimit:gcra:127.0.0.1' , demo carol 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a6b 1 '' '' 1 '' 1 20 1000 20 - ''

local function limit(KEYS, ARGV)
-- @limiter
end

local function buy(KEYS, ARGV)
-- @buy
end

local checks = tonumber(ARGV[9])
local decisions = {0, 0}
for i = 1, checks do
  local from = 10 + (i - 1) * 5
  local decision = limit({KEYS[7 + i]}, {ARGV[from], ARGV[from + 1], ARGV[from + 2], ARGV[from + 3], ARGV[from + 4]})
  decisions[i] = decision
  if decision[1] ~= 1 then
    local receipt = redis.call('HGET', KEYS[5], ARGV[2])
    if not (receipt and string.sub(receipt, 1, #ARGV[3] + 1) == ARGV[3] .. ' ') then
      return {decisions[1], decisions[2], 0}
    end
    decisions = {0, 0} -- sent again after it bought: its order, below
    break
  end
end
return {decisions[1], decisions[2], buy({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]},
  {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]})}
