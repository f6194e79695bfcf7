-- queue_join.lua: join a queued sale's waiting room, or ask for one's place in it (src/admission/).
--
-- KEYS[1]  sale meta hash     seckill:{sale:<id>}:meta         (starts_at_ms, ends_at_ms, queue_opens_at_ms,
--                                                               queue_rate: a queued sale has it)
-- KEYS[2]  pre-queue          seckill:{sale:<id>}:queue        (sorted set: buyer -> shuffle score)
-- KEYS[3]  late arrivals      seckill:{sale:<id>}:queue:late   (hash: buyer -> place, in arrival order)
-- KEYS[4]  queue state        seckill:{sale:<id>}:queue:state  (hash: seed, frozen, upto, tick_ms, lapsed)
-- KEYS[5]  spent challenges   seckill:{sale:<id>}:challenges   (sorted set: nonce -> expires_ms; lua/challenge_spend.lua)
-- ARGV[1]  buyer              (user id, as the app validated it: no control characters)
-- ARGV[2]  "join" | "ask"     ask never writes
-- ARGV[3]  challenge nonce    join of a sale with a proof of work (meta challenge_cost): the nonce of the
--                             solution the app verified (src/challenge/); "" or absent without one
-- ARGV[4]  challenge expiry   when that challenge expires, Unix ms (the spent nonce is kept until then)
--
-- Returns:
--   {"prequeue"}         the buyer is in the pre-queue (before starts_at: nobody has a place yet)
--   {"placed", place}    the buyer's place in line, 1 = first: a pre-queue buyer's is the rank of
--                        its shuffle score, a later buyer's its arrival order after all of them
--   either with a last "replayed": a join with a nonce spent before, by a buyer who has a place
--                        (its own join sent again, whose answer was lost): that place, nothing
--                        written
--   "not_in_queue"       ask only: the buyer never joined
--   "queue_not_open"     join before queue_opens_at_ms
--   "challenge_required" join without ARGV[3] of a sale whose meta has challenge_cost
--   "challenge_replayed" join with a nonce spent before, by a buyer without a place: nothing is written
--   "ended"              at or after ends_at_ms
--   "not_queued"         the sale has no waiting room
--   "unknown_sale"       no meta
--   an error (raised)    a join before the start whose queue state has no shuffle seed (damaged:
--                        re-seed the sale): nothing written, its nonce not spent
--
-- The shuffle: a pre-queue buyer's score is the first 52 bits (13 hex digits) of
-- SHA-1(seed .. "\0" .. buyer), an integer a double holds exactly; at the start the line is the
-- pre-queue by ascending score (equal scores, never seen in practice, by buyer id). The seed is
-- random, drawn by the app at the first seed, its SHA-256 public before the start and the seed
-- itself after (GET /sales/{id}), so anyone can recompute a score (docs/waiting-room.md).
--
-- Invariants kept: one place per buyer (ZADD NX; HGET before HSET, in one atomic call); the
-- pre-queue is frozen from the first call on or after the start ("frozen", so a clock stepping
-- back cannot add to it), which keeps every pre-queue place (ZRANK) fixed; late places are
-- ZCARD + HLEN + 1, so they follow every pre-queue place and each other in arrival order. A join of a
-- sale with a proof of work spends its solution's nonce once (ZADD NX, kept until the challenge
-- expires), whether or not the buyer had a place: each join costs its own work (a solution spent
-- before only tells a buyer the place they have, as an "ask" does).
--
-- Example (after seeding a queued sale "demo"):
--   sed -e '/^-- @queue_preamble$/r lua/queue_preamble.lua' -e '/^-- @nonce_spend$/r lua/nonce_spend.lua' lua/queue_join.lua > /tmp/seckill-queue-join.lua
--   redis-cli --eval /tmp/seckill-queue-join.lua 'seckill:{sale:demo}:meta' 'seckill:{sale:demo}:queue' 'seckill:{sale:demo}:queue:late' 'seckill:{sale:demo}:queue:state' 'seckill:{sale:demo}:challenges' , alice join

-- @queue_preamble
-- @nonce_spend
if meta[3] and now_ms >= tonumber(meta[3]) then
  return 'ended'
end
local state = redis.call('HMGET', KEYS[4], 'seed', 'frozen')
local buyer, join = ARGV[1], ARGV[2] == 'join'
local before_start = now_ms < tonumber(meta[2]) and not state[2]
local replayed = false

if join then
  if before_start and now_ms < tonumber(meta[6]) then
    return 'queue_not_open'
  end
  -- Before the nonce is spent: a join refused by this error may be sent again with it.
  if before_start and not state[1] then
    error('seckill queue_join.lua: the queue state has no seed: re-seed the sale')
  end
  local nonce = ARGV[3] or ''
  if nonce ~= '' then
    replayed = not spend_nonce(KEYS[5], nonce, ARGV[4], now_ms)
  elseif redis.call('HEXISTS', KEYS[1], 'challenge_cost') == 1 then
    return 'challenge_required'
  end
end

-- A buyer's standing, marked when a replayed solution asked for it.
local function standing(reply)
  if replayed then
    reply[#reply + 1] = 'replayed'
  end
  return reply
end

-- For a buyer without a place: an ask's answer, or a replayed solution's refusal; nil: place them.
local function unplaced()
  if not join then
    return 'not_in_queue'
  end
  if replayed then
    return 'challenge_replayed'
  end
end

if before_start then
  if redis.call('ZSCORE', KEYS[2], buyer) then
    return standing({'prequeue'})
  end
  local refused = unplaced()
  if refused then
    return refused
  end
  local score = tonumber(string.sub(redis.sha1hex(state[1] .. '\0' .. buyer), 1, 13), 16)
  redis.call('ZADD', KEYS[2], 'NX', score, buyer)
  return {'prequeue'}
end

local rank = redis.call('ZRANK', KEYS[2], buyer)
if rank then
  return standing({'placed', rank + 1})
end
local late = redis.call('HGET', KEYS[3], buyer)
if late then
  return standing({'placed', tonumber(late)})
end
local refused = unplaced()
if refused then
  return refused
end
local place = redis.call('ZCARD', KEYS[2]) + redis.call('HLEN', KEYS[3]) + 1
redis.call('HSET', KEYS[3], buyer, place)
if not state[2] then
  redis.call('HSET', KEYS[4], 'frozen', 1)
end
return {'placed', place}
