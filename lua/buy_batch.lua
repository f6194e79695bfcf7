-- buy_batch.lua: several purchases of one sale (one shard of it) in one call, each decided exactly
-- as its own call of lua/buy_limited.lua (or of lua/buy.lua, without limits) would decide it, one
-- after the other in the order given. Purchases that queue up for a shard go together
-- (src/purchase/batch.rs), so they share a call's fixed cost on Redis.
--
-- Assembled, not run as it stands, like lua/buy_limited.lua: the line "-- @limiter" below is
-- followed by one limiter script (lua/<algorithm>.lua), the line "-- @buy" by lua/buy.lua
-- (crate::redis::lua::buy_batch; the example does it with sed).
--
-- KEYS[1..6]   buy.lua's KEYS: the sale's keys (one shard's, for a sharded sale)
-- KEYS[7..]    the purchases' limiter keys, in order: `checks` keys for each purchase (below)
-- ARGV[1]      sale id
-- ARGV[2]      shards: how many shards the caller believes the sale has (buy.lua's ARGV[4])
-- ARGV[3]      n: how many purchases follow
-- then for each purchase, in order:
--   user id, order id, place ("" without one), traceparent ("" when traces are off),
--   checks (0, 1 or 2: how many limits to check first, as buy_limited.lua's ARGV[7]),
--   then 5 limiter ARGV (limit, window_ms, burst, nonce, now_us) per check
--
-- Returns an array of n replies, the i-th for the i-th purchase:
--   checks = 0   buy.lua's reply
--   checks > 0   buy_limited.lua's reply {client, buyer, purchase}
--   {"failed", message}
--                the purchase's part raised an error (a damaged key): like buy.lua alone, it
--                wrote nothing; the purchases before and after it stand on their own
--
-- Invariants kept: each purchase keeps every invariant of buy.lua and buy_limited.lua, and the
-- whole call is atomic, so each purchase is too. One purchase's error is caught (pcall) and does
-- not stop the others: buy.lua orders its writes so that a raised error leaves nothing written,
-- and a limiter fails on a key of another type before it writes. All keys share the shard's hash
-- tag on a Redis Cluster (the app sends a limit in its own call otherwise).
--
-- Example (gcra, 20 per second per client; dave then erin buy the demo sale, both from 127.0.0.1):
--   sed -e '/^-- @limiter$/r lua/gcra.lua' -e '/^-- @buy$/r lua/buy.lua' lua/buy_batch.lua > /tmp/seckill-buy-batch.lua
--   redis-cli --eval /tmp/seckill-buy-batch.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:buyers' 'seckill:{sale:demo}:orders' 'seckill:{sale:demo}:receipts' 'seckill:{sale:demo}:queue:bought' 'seckill:{sale:demo}:ratelimit:gcra:127.0.0.1' 'seckill:{sale:demo}:ratelimit:gcra:127.0.0.1' , demo 1 2 dave 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a6c '' '' 1 20 1000 20 - '' erin 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a6d '' '' 1 20 1000 20 - ''

local function limit(KEYS, ARGV)
-- @limiter
end

local function buy(KEYS, ARGV)
-- @buy
end

local sale_keys = {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}
local sale, shards = ARGV[1], ARGV[2]
local replies = {}
local arg, key = 4, 7

-- Each purchase: its limits in order until one refuses, then buy.lua, as buy_limited.lua does;
-- an error raised in its part becomes its reply.
for i = 1, tonumber(ARGV[3]) do
  local user, order_id, place, traceparent = ARGV[arg], ARGV[arg + 1], ARGV[arg + 2], ARGV[arg + 3]
  local checks = tonumber(ARGV[arg + 4])
  local ok, reply = pcall(function()
    local decisions = {0, 0}
    for c = 1, checks do
      local from = arg + 5 + (c - 1) * 5
      local decision = limit({KEYS[key + c - 1]},
        {ARGV[from], ARGV[from + 1], ARGV[from + 2], ARGV[from + 3], ARGV[from + 4]})
      decisions[c] = decision
      if decision[1] ~= 1 then
        return {decisions[1], decisions[2], 0}
      end
    end
    local bought = buy(sale_keys, {sale, user, order_id, shards, place, traceparent})
    if checks == 0 then
      return bought
    end
    return {decisions[1], decisions[2], bought}
  end)
  if ok then
    replies[i] = reply
  else
    replies[i] = {'failed', type(reply) == 'table' and tostring(reply.err) or tostring(reply)}
  end
  arg = arg + 5 + 5 * checks
  key = key + checks
end
return replies
