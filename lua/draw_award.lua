-- draw_award.lua: a draw's winners of one size get their reservations (src/draw/run/award.rs),
-- each a purchase by lua/purchase.lua's rules with a place "a<n>", one of the two purchases a size
-- of a drop in draw mode (meta line = "draw") takes (the other: lua/draw_release.lua's offers).
-- The run calls it in chunks of at most 250 winners.
--
-- KEYS[1..7]  buy.lua's KEYS of the size's sale: its meta, stock, buyers, orders, receipts, queue's
--             buyers (unused: a draw's size has no line) and the group's holdings
--             (seckill:{group:<d>}:sale:<d>.<size>:meta, ..., seckill:{group:<d>}:held): all in the
--             drop's slot
-- ARGV[1]     sale id             <drop>.<size>
-- ARGV[2]     n                   winners that follow
-- then for each winner, in order:
--   user id, order id (the UUID v7 of its draw_results row), n (its number among the drop's
--   winners: the place "a<n>"), quantity (the units won, 1 to per_buyer)
--
-- Returns an array of n replies, the i-th for the i-th winner: buy.lua's reply to that purchase
-- ({"reserved", pay_by_ms} for an award made now; {"already_purchased", order id, ...} for a
-- winner awarded by an earlier call, which a re-run after a crash meets; any other reply, such as
-- "paused", means the award was not made), or {"failed", message} when its part raised
-- an error (a damaged key): like buy.lua alone, it wrote nothing.
--
-- Invariants kept: buy.lua's, for each award (one buyer once, the group's per_buyer, stock never
-- below zero, XADD + HSET + SADD together or not at all), and the one DECRBY at the end takes
-- exactly the units the call awarded, so stock_initial = stock + units sold - units released holds
-- when the call ends. An award skips the start and end checks (purchase.lua): its winners were
-- drawn when the entries closed, and an ended size must not stall the run for good.
--
-- Assembled, not run as it stands: the line "-- @purchase" below is followed by lua/purchase.lua
-- (and its "-- @canonical" by lua/canonical.lua).
--
-- Example (after lua/drop_seed.lua seeded "kicks" in draw mode, size 40, with a payment window):
--   sed -e '/^-- @purchase$/r lua/purchase.lua' lua/draw_award.lua | sed -e '/^-- @canonical$/r lua/canonical.lua' > /tmp/seckill-draw-award.lua
--   redis-cli --eval /tmp/seckill-draw-award.lua 'seckill:{group:kicks}:sale:kicks.40:meta' 'seckill:{group:kicks}:sale:kicks.40:stock' 'seckill:{group:kicks}:sale:kicks.40:buyers' 'seckill:{group:kicks}:sale:kicks.40:orders' 'seckill:{group:kicks}:sale:kicks.40:receipts' 'seckill:{group:kicks}:sale:kicks.40:queue:bought' 'seckill:{group:kicks}:held' , kicks.40 1 alice 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69 1 1

local shards = '1'
-- @purchase

local replies = {}
local arg = 3
for i = 1, tonumber(ARGV[2]) do
  -- Each award written at once (its own entry): the run's calls are few, and a damaged key fails
  -- the one award.
  local ok, reply = pcall(buy_now, ARGV[arg], ARGV[arg + 1], 'a' .. ARGV[arg + 2], '', ARGV[arg + 3], '')
  if ok then
    replies[i] = reply
  else
    replies[i] = {'failed', type(reply) == 'table' and tostring(reply.err) or tostring(reply)}
  end
  arg = arg + 4
end
if sold > 0 then
  redis.call('DECRBY', KEYS[2], sold)
end
return replies
