-- buy_batch.lua: several purchases of one sale (one shard of it) in one call, each decided exactly
-- as its own call of lua/buy_limited.lua (or of lua/buy.lua, without limits) would decide it, one
-- after the other in the order given. Purchases that queue up for a shard go together
-- (src/purchase/batch.rs), so they share a call's fixed cost on Redis, and the reads every
-- purchase of buy.lua makes alike: the sale's meta, its stock and the time are read once per call
-- (the limits are given that time as their ARGV[6], and a table of what they learned of their
-- keys in the call as their ARGV[7]), and the writes are made once, at the end: one stream entry
-- with every order of the call, one HSET of their receipts, one SADD of their buyers
-- (lua/purchase.lua's commit()) and one DECRBY of the units sold. Each purchase then costs its
-- limits and a SISMEMBER.
-- Both scripts buy by the one copy of the rules, lua/purchase.lua (tests/api/batch.rs checks
-- that they decide alike).
--
-- Assembled, not run as it stands, like lua/buy_limited.lua: the line "-- @limiter" below is
-- followed by one limiter script (lua/<algorithm>.lua, with its lua/limiter_preamble.lua), the
-- line "-- @purchase" by lua/purchase.lua, and its "-- @canonical" by lua/canonical.lua
-- (crate::redis::lua::buy_batch; the example does it with sed).
--
-- KEYS[1..7]   buy.lua's KEYS: the sale's keys (one shard's, for a sharded sale; KEYS[6] the drop
--              line's when the places are a drop's "d<place>.<expires_ms>": the app never mixes the two in a call)
-- KEYS[8..]    the purchases' limiter keys, in order: `checks` keys for each purchase (below)
-- ARGV[1]      sale id
-- ARGV[2]      shards: how many shards the caller believes the sale has (buy.lua's ARGV[4])
-- ARGV[3]      n: how many purchases follow
-- then for each purchase, in order:
--   user id, order id, place ("" without one), traceparent ("" when traces are off), quantity,
--   proven (buy.lua's ARGV[8]), checks (0, 1 or 2: how many limits to check first, as
--   buy_limited.lua's ARGV[9]),
--   then 5 limiter ARGV (limit, window_ms, burst, nonce, now_us) per check (the script adds its
--   own reading of TIME as the limiter's ARGV[6])
--
-- Returns an array of n replies, the i-th for the i-th purchase:
--   checks = 0   buy.lua's reply to that purchase
--   checks > 0   buy_limited.lua's reply {client, buyer, purchase}
--   {"failed", message}
--                the purchase's part raised an error (a damaged key): like buy.lua alone, it
--                wrote nothing of the purchase (a limit it passed before keeps the request
--                counted, as a purchase refused after its limits does); the purchases before and
--                after it stand on their own. The writes
--                at the end failing (a damaged stream, receipts or queue key, which every purchase
--                of the call would have met) make every accepted purchase's reply "failed", and
--                that of each buyer answered already_purchased for one of them, and that of each
--                purchase refused for the stock (sold_out, insufficient_stock) while units of
--                the call were pending (they are not taken after all): nothing of them is written
--
-- A purchase whose limit refuses but whose buyer's receipt names its order id was bought by an
-- earlier run of this same call (a Redis Cluster client re-sends one that timed out): it answers
-- {0, 0, already_purchased with that order}, as buy_limited.lua does, not the refusal.
--
-- Invariants kept: buy.lua's, for each purchase and in the same order of checks (unknown sale,
-- shard count, buyer, admission, start, end, stock); the stock is checked against what is left
-- after the purchases before it in the call, so it never goes below zero, and the one DECRBY at the
-- end takes exactly the units the call sold, so stock_initial = stock + SCARD(buyers) -
-- SCARD(released) (in units: buy.lua's) holds when the call ends (nothing else runs during it).
-- The writes go in buy.lua's order (XADD, HSET, a queued sale's ZADD, then SADD), for all the
-- call's purchases together, and a failure leaves nothing of them written. An error in one
-- purchase's part is caught (pcall), leaves nothing of it pending and does not stop the others.
-- All keys share the shard's hash tag on a Redis Cluster (the app sends a limit in its own call
-- otherwise).
--
-- Example (gcra, 20 per second per client; dave then erin buy the demo sale, both from 127.0.0.1):
--   sed -e '/^-- @limiter$/r lua/gcra.lua' -e '/^-- @purchase$/r lua/purchase.lua' lua/buy_batch.lua | sed -e '/^-- @limiter_preamble$/r lua/limiter_preamble.lua' -e '/^-- @canonical$/r lua/canonical.lua' > /tmp/seckill-buy-batch.lua
--   redis-cli --eval /tmp/seckill-buy-batch.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:buyers' 'seckill:{sale:demo}:orders' 'seckill:{sale:demo}:receipts' 'seckill:{sale:demo}:queue:bought' 'seckill:{sale:demo}:held' 'seckill:{sale:demo}:ratelimit:gcra:127.0.0.1' 'seckill:{sale:demo}:ratelimit:gcra:127.0.0.1' , demo 1 2 dave 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a6c '' '' 1 '' 1 20 1000 20 - '' erin 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a6d '' '' 1 '' 1 20 1000 20 - ''

local function limit(KEYS, ARGV)
-- @limiter
end

-- The purchase's rules, and what every purchase of the call reads alike (the sale, its stock, the
-- time), read once.
local shards = ARGV[2]
-- @purchase
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- the limits' time (below 2^53: exact)

local replies = {}
local arg, key = 4, 8
-- What the limits learn of their keys during the call (lua/sliding_log.lua's ARGV[7]): a key seen
-- again in the call is not pruned, counted nor given its TTL again.
local memo = {}
-- The purchases decided and pending (commit() writes them all at the end), those answered
-- already_purchased for a buyer pending earlier in the call, and those refused for the stock while
-- some was pending: all are "failed" if the commit is.
local accepted, echoes, short = {}, {}, {}
-- Whether a purchase's reply (its limits' {client, buyer, purchase} when checked) refuses it for
-- the stock.
local function for_stock(reply, checks)
  local bought = reply
  if checks > 0 then
    bought = reply[3]
  end
  return bought == 'sold_out' or (type(bought) == 'table' and bought[1] == 'insufficient_stock')
end
-- One purchase at ARGV[arg] with its limits' keys from KEYS[key]: its limits in order until one
-- refuses, then the purchase, as buy_limited.lua does.
local function one(arg, key, checks)
  local first, second = 0, 0
  for c = 1, checks do
    local from = arg + 7 + (c - 1) * 5
    local decision = limit({KEYS[key + c - 1]},
      {ARGV[from], ARGV[from + 1], ARGV[from + 2], ARGV[from + 3], ARGV[from + 4], now_us, memo})
    if c == 1 then
      first = decision
    else
      second = decision
    end
    if decision[1] ~= 1 then
      local receipt = redis.call('HGET', KEYS[5], ARGV[arg])
      if not (receipt and string.sub(receipt, 1, #ARGV[arg + 1] + 1) == ARGV[arg + 1] .. ' ') then
        return {first, second, 0}
      end
      first, second = 0, 0 -- sent again after it bought: its order, below
      break
    end
  end
  local bought = buy(ARGV[arg], ARGV[arg + 1], ARGV[arg + 2], ARGV[arg + 3], ARGV[arg + 4], ARGV[arg + 5])
  if checks == 0 then
    return bought
  end
  return {first, second, bought}
end
-- Each purchase in order; an error raised in its part becomes its reply.
for i = 1, tonumber(ARGV[3]) do
  local checks = tonumber(ARGV[arg + 6])
  local was_pending, pending_before, sold_before = pending_of[ARGV[arg]] ~= nil, #pending, sold
  local ok, reply = pcall(one, arg, key, checks)
  if ok then
    replies[i] = reply
    if #pending > pending_before then
      accepted[#accepted + 1] = i
    elseif was_pending then
      echoes[#echoes + 1] = i
    elseif sold_before > 0 and for_stock(reply, checks) then
      short[#short + 1] = i
    end
  else
    replies[i] = {'failed', type(reply) == 'table' and tostring(reply.err) or tostring(reply)}
  end
  arg = arg + 7 + 5 * checks
  key = key + checks
end
local failed = commit()
if failed then
  for _, i in ipairs(accepted) do
    replies[i] = {'failed', failed}
  end
  for _, i in ipairs(echoes) do
    replies[i] = {'failed', failed}
  end
  for _, i in ipairs(short) do
    replies[i] = {'failed', failed}
  end
end
if sold > 0 then
  redis.call('DECRBY', KEYS[2], sold)
end
return replies
