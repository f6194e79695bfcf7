-- token_bucket.lua: token bucket in one hash per client (tokens + time of the last refill).
--
-- KEYS[1]  the client's bucket  <prefix>:ratelimit:token-bucket:{<client ip>}  (hash: level, ts)
-- ARGV[1]  limit              tokens refilled per window, integer 1..1000000
-- ARGV[2]  window_ms          refill period in milliseconds, integer 1..3600000
--                             (limit and burst x window in us at most 2^50: exact arithmetic)
-- ARGV[3]  burst              bucket capacity in tokens, integer 1..1000000 (usually = limit)
-- ARGV[4]  nonce              unused
-- ARGV[5]  now_us             TESTS ONLY, optional: the time in microseconds instead of Redis TIME
-- ARGV[6]  time_us            optional: Redis TIME in microseconds as the calling script read it
--                             (lua/buy_batch.lua, once for all its limits): used without ARGV[5],
--                             instead of asking Redis again, and without its slack
--
-- Returns {allowed, remaining, retry_after_us, reset_us}:
--   allowed         1 admitted (one token taken), 0 refused (nothing is written)
--   remaining       whole tokens left after this request
--   retry_after_us  0 when admitted; otherwise the exact wait until one whole token is there
--   reset_us        wait until the bucket is full again
--
-- A new client starts with a full bucket. Tokens are kept exactly, fractions included: the
-- level is stored in units of 1/window_us of a token, so the refill is `limit` units per
-- microsecond and one request costs window_us units; every value stays an integer below 2^53.
-- The key expires once the bucket would be full again. With ARGV[5] the TTL gets 60 s more,
-- so a test's simulated clock cannot race real expiry.
--
-- Example (20 per second, bursts of 20):
--   sed -e '/^-- @limiter_preamble$/r lua/limiter_preamble.lua' lua/token_bucket.lua > /tmp/seckill-token-bucket.lua
--   redis-cli --eval /tmp/seckill-token-bucket.lua 'seckill:ratelimit:token-bucket:{127.0.0.1}' , 20 1000 20 -

-- @limiter_preamble
local capacity = tonumber(ARGV[3]) * window
local function ceil_div(a, b) return -idiv(-a, b) end

local state = redis.call('HMGET', KEYS[1], 'level', 'ts')
local level, ts = tonumber(state[1]), tonumber(state[2])
if not level or not ts then
  level, ts = capacity, now
else
  level = math.min(level, capacity)
  if now > ts then
    -- Full after ceil(missing / limit) us; before that the refill stays below the capacity.
    local elapsed = now - ts
    if elapsed >= ceil_div(capacity - level, limit) then
      level = capacity
    else
      level = level + elapsed * limit
    end
    ts = now
  end
end

if level >= window then
  level = level - window
  redis.call('HSET', KEYS[1], 'level', int(level), 'ts', int(ts))
  local reset = ceil_div(capacity - level, limit)
  redis.call('PEXPIRE', KEYS[1], int(idiv(reset, 1000) + 1 + ttl_slack_ms))
  return {1, idiv(level, window), 0, reset}
end
return {0, 0, ceil_div(window - level, limit), ceil_div(capacity - level, limit)}
