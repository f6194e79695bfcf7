-- admit.lua: move a line's admission on (a queued sale's, or a drop's), and read how far it got
-- (src/admission/).
--
-- KEYS[1]  sale meta hash     seckill:{sale:<id>}:meta          (starts_at_ms, ends_at_ms, queue_rate,
--                                                                queue_ttl_ms, challenge_cost); a drop's line:
--                                                                seckill:{group:<d>}:line:meta, and KEYS[3..7]
--                                                                likewise under seckill:{group:<d>}:line
-- KEYS[2]  stock counter      seckill:{sale:<id>}:stock         (a drop's: its first size's)
-- KEYS[3]  pre-queue          seckill:{sale:<id>}:queue         (sorted set: buyer -> shuffle score)
-- KEYS[4]  late arrivals      seckill:{sale:<id>}:queue:late    (hash: buyer -> place)
-- KEYS[5]  admitted buyers    seckill:{sale:<id>}:queue:bought  (sorted set: buyer -> place, by buy.lua)
-- KEYS[6]  admissions         seckill:{sale:<id>}:queue:admits  (sorted set: "<upto>:<time_ms>" scored
--                                                                by upto: places 1..upto were admitted by then)
-- KEYS[7]  queue state        seckill:{sale:<id>}:queue:state   (hash: seed, epoch, upto, tick_ms, lapsed, frozen)
-- KEYS[8..] more stock        a drop's line: its other sizes' stock counters (seckill:{group:<d>}:sale:<d>.<size>:stock);
--                             the stock left is the sum of KEYS[2] and these. A sale's call passes none
-- KEYS[..]  size metas        a drop's line, after them: its sizes' metas, in the order of their stock
--                             counters (KEYS[2]'s first): a size the repair holds (its "restoring"
--                             mark) sells nothing yet, so its stock counts for nothing. A sale's call
--                             passes none (its own meta, KEYS[1], says whether it is held)
-- ARGV[1]  factor             admitted buyers whose window is open and who have not bought may be at
--                             most ceil(stock left * factor)
-- ARGV[2]  tick_ms            admission moves at most once per tick, whoever asks
-- ARGV[3]  sizes              a drop's line: how many sizes (stock counters, then metas) KEYS holds;
--                             absent or 0 for a sale
--
-- Returns {now_ms, upto, lapsed, places, stock_left, starts_at_ms, ends_at_ms (-1: none), rate,
--          queue_ttl_ms, {upto_1, time_1, upto_2, time_2, ...}, challenge_cost (-1: none), seed,
--          queue_opens_at_ms (-1: none)}:
--   upto         places 1..upto are admitted (0 before the start)
--   lapsed       places 1..lapsed were admitted more than queue_ttl_ms ago: their windows are closed
--   places       places handed out so far (pre-queue + late arrivals)
--   the list     when each place in lapsed+1..upto was admitted: place p at the time of the first
--                pair with upto_i >= p (its admission token expires queue_ttl_ms after)
--   seed         the line's shuffle seed and its state's epoch, as "<seed>/<epoch>" ("<seed>" for a
--                state older than the epoch, "" if none): the epoch is new whenever the state
--                starts again from nothing (a repair after Redis lost it keeps the seed, not the
--                places handed out), so the app binds its tickets to both
-- or "not_queued" (no queue_rate), "unknown_sale" (no meta).
--
-- Admission moves (from the start, at most once per tick) by rate * elapsed places, never past
-- the places handed out, and never so far that the admitted, unexpired, unused places exceed
-- ceil(stock left * factor): none while the sale is sold out, paused (its meta's "paused" field,
-- lua/control.lua) or held by a repair (its "restoring" mark, lua/seed.lua; a drop's line counts
-- only the stock of its sizes the repair does not hold), again when units come back, it resumes
-- or the hold is lifted. A capped or idle tick keeps no credit, so a crowd
-- arriving after a quiet spell is not let in at once.
-- Windows older than queue_ttl_ms are dropped from the list (at most 1000 per call) into lapsed.
--
-- Example:
--   sed -e '/^-- @queue_preamble$/r lua/queue_preamble.lua' lua/admit.lua > /tmp/seckill-admit.lua
--   redis-cli --eval /tmp/seckill-admit.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:stock' 'seckill:{sale:demo}:queue' 'seckill:{sale:demo}:queue:late' 'seckill:{sale:demo}:queue:bought' 'seckill:{sale:demo}:queue:admits' 'seckill:{sale:demo}:queue:state' , 2 200

-- @queue_preamble
local starts_at, rate, ttl = tonumber(meta[2]), tonumber(meta[4]), tonumber(meta[5])
local factor, tick_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
-- The stock left, and of it what admitted buyers can buy now (a size the repair holds sells
-- nothing until its hold is lifted).
local sizes = tonumber(ARGV[3]) or 0
local stock, sellable = 0, 0
for i = 0, sizes > 0 and sizes - 1 or #KEYS - 7 do
  -- Counter i: KEYS[2], then KEYS[8..]; a drop's size i has its meta after the counters.
  local units = tonumber(redis.call('GET', i == 0 and KEYS[2] or KEYS[7 + i])) or 0
  if i > 0 then
    units = math.max(units, 0)
  end
  stock = stock + units
  if i >= sizes or redis.call('HEXISTS', KEYS[7 + sizes + i], 'restoring') == 0 then
    sellable = sellable + units
  end
end
local places = redis.call('ZCARD', KEYS[3]) + redis.call('HLEN', KEYS[4])
local state = redis.call('HMGET', KEYS[7], 'upto', 'tick_ms', 'lapsed', 'frozen', 'seed', 'epoch')
local upto = tonumber(state[1]) or 0
local tick = tonumber(state[2]) or starts_at
local lapsed = tonumber(state[3]) or 0
local ended = meta[3] and now_ms >= tonumber(meta[3])
-- A paused sale (lua/control.lua) admits nobody more; its windows still lapse on time. So does a
-- sale the repair holds (its "restoring" mark, lua/seed.lua's hold), whatever an operator resumed.
local held = redis.call('HMGET', KEYS[1], 'paused', 'restoring')
local paused = held[1] or held[2]

if now_ms >= starts_at and not ended then
  if not state[4] then
    redis.call('HSET', KEYS[7], 'frozen', 1)
  end
  -- Windows that closed: their places lapse.
  local cutoff = now_ms - ttl
  for _ = 1, 1000 do
    local first = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
    if #first == 0 then
      break
    end
    local admitted_at = tonumber(string.match(first[1], ':(%d+)$'))
    if admitted_at > cutoff then
      break
    end
    lapsed = tonumber(first[2])
    redis.call('ZREM', KEYS[6], first[1])
  end
  if now_ms - tick >= tick_ms then
    local admitted = math.floor(upto)
    local room = 0
    if sellable > 0 and not paused then
      local unused = admitted - lapsed - redis.call('ZCOUNT', KEYS[5], '(' .. lapsed, admitted)
      room = math.ceil(sellable * factor) - unused
    end
    local next = math.min(upto + rate * (now_ms - tick) / 1000, places, admitted + math.max(room, 0))
    if next < upto then
      next = upto
    end
    if math.floor(next) > admitted then
      redis.call('ZADD', KEYS[6], math.floor(next), string.format('%d:%d', math.floor(next), now_ms))
    end
    upto = next
    redis.call('HSET', KEYS[7], 'upto', string.format('%.3f', upto), 'tick_ms', now_ms, 'lapsed', lapsed)
  elseif lapsed ~= (tonumber(state[3]) or 0) then
    redis.call('HSET', KEYS[7], 'lapsed', lapsed)
  end
end

local list = redis.call('ZRANGE', KEYS[6], 0, -1, 'WITHSCORES')
local pairs_out = {}
for i = 1, #list, 2 do
  pairs_out[#pairs_out + 1] = tonumber(list[i + 1])
  pairs_out[#pairs_out + 1] = tonumber(string.match(list[i], ':(%d+)$'))
end
local cost = tonumber(redis.call('HGET', KEYS[1], 'challenge_cost')) or -1
local binding = state[5] or ''
if state[5] and state[6] then
  binding = state[5] .. '/' .. state[6]
end
return {now_ms, math.floor(upto), lapsed, places, stock, starts_at, tonumber(meta[3]) or -1, rate, ttl, pairs_out, cost,
  binding, tonumber(meta[6]) or -1}
