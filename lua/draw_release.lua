-- draw_release.lua: lua/release.lua for a size of a drop in draw mode once it is drawn: the units
-- of cancelled or expired reservations come back each exactly once, and are offered to the draw's
-- waitlist before the stock (src/draw/offers.rs; the rule is crate::draw::waitlist::offer).
--
-- KEYS[1..7]  buy.lua's KEYS of the size's sale: meta, stock, buyers, orders, receipts, queue's
--             buyers (unused) and the group's holdings (seckill:{group:<d>}:sale:<d>.<size>:meta, ...)
-- KEYS[8]     released set     seckill:{group:<d>}:sale:<d>.<size>:released (order ids given back)
-- KEYS[9]     waitlist         seckill:{group:<d>}:draw:waitlist (lua/draw_waitlist.lua's hash)
-- KEYS[10]    waiting places   seckill:{group:<d>}:draw:waitlist:<size> (this size's sorted set)
-- ARGV[1]     a UUID v7, the base of the offers' order ids: the k-th offer of the call gets it with
--             its last 8 hex digits plus k (mod 2^32), so ids are new in every call that offers
-- ARGV[2]     the size's short name
-- ARGV[3..]   pairs: order id, units (1-100), of orders Postgres moved from 'reserved' to
--             'cancelled' or 'expired' (release.lua's ARGV)
--
-- Returns {released, stock_before, units, to_stock, offers...}:
--   released, units   as release.lua's: orders not released before, and their units
--   stock_before      the stock before the call
--   to_stock          of the units given back, those no place took: the stock rose by as many
--   offers            4 items per offer: the place, the user, the new order id, its units
-- Or "unknown_sale" (nothing written: the release stays owed), as release.lua; or "paused"
-- (nothing written, the release stays owed) while the drop is paused and not ended: its units wait
-- for the resume to reach the waitlist, as the stock of a draw's size sells to no one else. Raises,
-- with nothing written, on a damaged stock or extra_released (release.lua's checks) or a waitlist
-- key of the wrong type.
--
-- The offer: when the call gives units back, it walks the size's waiting places in order; each
-- place whose quantity fits in the units still to give is offered its quantity, a purchase by
-- lua/purchase.lua's rules with the place "w<n>" (a waitlist's offer: a reservation with its own
-- payment window), and stops waiting in every size. The units of one call are offered together.
-- A place the purchase refuses for good (already_purchased, limit_reached) stops waiting too; any
-- other refusal (the drop ended) ends the walk, and what is left goes to the stock.
--
-- Invariants kept: release.lua's gate (SADD released answers 1 once per order, and only then do its
-- units come back), so a release repeated by two sweepers or a re-drive gives and offers its units
-- once; an offer takes from those units (the DECRBY of `sold` at the end nets them), so
-- stock_initial = stock + units sold - units released holds when the call ends; a place is offered
-- at most once (its state leaves "w" in the same call).
--
-- Assembled, not run as it stands: the line "-- @purchase" below is followed by lua/purchase.lua,
-- the line "-- @release_gate" by lua/release_gate.lua, and the "-- @canonical" of both by
-- lua/canonical.lua (once: the example's sed puts it in twice, which Lua takes alike).
--
-- Example (after lua/draw_award.lua's and lua/draw_waitlist.lua's examples: alice's award
-- 0190b7a2-... of size 40, 1 unit, cancelled, goes to bob, waiting at place 1; the reply ends
-- 1 bob 0190b7a3-0000-7000-8000-000000000001 1):
--   sed -e '/^-- @purchase$/r lua/purchase.lua' -e '/^-- @release_gate$/r lua/release_gate.lua' lua/draw_release.lua | sed -e '/^-- @canonical$/r lua/canonical.lua' > /tmp/seckill-draw-release.lua
--   redis-cli --eval /tmp/seckill-draw-release.lua 'seckill:{group:kicks}:sale:kicks.40:meta' 'seckill:{group:kicks}:sale:kicks.40:stock' 'seckill:{group:kicks}:sale:kicks.40:buyers' 'seckill:{group:kicks}:sale:kicks.40:orders' 'seckill:{group:kicks}:sale:kicks.40:receipts' 'seckill:{group:kicks}:sale:kicks.40:queue:bought' 'seckill:{group:kicks}:held' 'seckill:{group:kicks}:sale:kicks.40:released' 'seckill:{group:kicks}:draw:waitlist' 'seckill:{group:kicks}:draw:waitlist:40' , 0190b7a3-0000-7000-8000-000000000000 40 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69 1

local shards = '1'
-- @purchase
-- @release_gate

-- Nor while the repair restores the size (lua/release.lua's "restoring" rule).
if not stock_raw or meta[13] then
  return 'unknown_sale'
end
-- Nor while the drop is paused (purchase.lua's `paused`, `timing`), unless it has ended: the
-- units would go to the stock, which only the draw's awards buy, and the waitlist would never be
-- offered them. The sweeper re-drives the release; after the resume it offers them.
if paused and timing ~= 'ended' then
  return 'paused'
end
if not stock then
  error('seckill lua/draw_release.lua: the stock of the sale is damaged (' .. stock_raw .. '): nothing written')
end
local base = ARGV[1]
if not string.match(base, '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$') then
  error('seckill lua/draw_release.lua: ARGV[1] is not a UUID (' .. base .. '): nothing written')
end
local size = ARGV[2]
-- The waitlist's keys are read and written after the gate has counted the orders released: one of
-- the wrong type would fail the call there, their units neither offered nor in the stock, and the
-- gate closed to every retry. So it raises here, with nothing written.
for key, kind in pairs({[KEYS[9]] = 'hash', [KEYS[10]] = 'zset'}) do
  local found = redis.call('TYPE', key).ok
  if found ~= 'none' and found ~= kind then
    error('seckill lua/draw_release.lua: ' .. key .. ' is a ' .. found .. ', not a ' .. kind .. ': nothing written')
  end
end

local stock_before = stock
local released, units = give_back(KEYS[8], KEYS[1], 3)
-- buy() sees the units given back as stock.
stock = stock + units

local reply = {released, stock_before, units, 0}
local to_give, k = units, 0
local low = tonumber(string.sub(base, 29), 16)
-- The size's waiting places in order, a page at a time (the score is the place): a release
-- reads as many as its walk needs, not the whole list (which is as long as the drop's stock).
local PAGE = 64
local after, stopped = '0', false
while to_give > 0 and not stopped do
  local page = redis.call('ZRANGE', KEYS[10], '(' .. after, '+inf', 'BYSCORE', 'LIMIT', 0, PAGE)
  stopped = #page < PAGE -- the last page
  for _, place in ipairs(page) do
    if to_give == 0 then
      break
    end
    after = place
    local kept = redis.call('HGET', KEYS[9], place)
    local quantity, sizes, user = string.match(kept or '', '^(%d+) (%S+) w (.+)$')
    if not quantity then
      -- Offered in another size (or gone): no longer waiting here.
      redis.call('ZREM', KEYS[10], place)
    elseif tonumber(quantity) <= to_give then
      k = k + 1
      local order_id = string.sub(base, 1, 28) .. string.format('%08x', (low + k) % 4294967296)
      local ok, answer = pcall(buy_now, user, order_id, 'w' .. place, '', quantity, '')
      local word = ok and (type(answer) == 'table' and answer[1] or answer)
      if word == 'reserved' or word == 'ok' then
        to_give = to_give - tonumber(quantity)
        redis.call('HSET', KEYS[9], place, quantity .. ' ' .. sizes .. ' o:' .. size .. ':' .. order_id .. ' ' .. user)
        redis.call('ZREM', KEYS[10], place)
        reply[#reply + 1], reply[#reply + 2], reply[#reply + 3], reply[#reply + 4] = place, user, order_id, quantity
      elseif word == 'already_purchased' or word == 'limit_reached' then
        redis.call('HSET', KEYS[9], place, quantity .. ' ' .. sizes .. ' s ' .. user)
        redis.call('ZREM', KEYS[10], place)
      else
        stopped = true
        break
      end
    end
  end
end
reply[4] = to_give
if units - sold ~= 0 then
  redis.call('INCRBY', KEYS[2], units - sold)
end
return reply
