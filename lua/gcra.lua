-- gcra.lua: generic cell rate algorithm, one key holding the theoretical arrival time (TAT).
--
-- KEYS[1]  the client's TAT   <prefix>:ratelimit:gcra:{<client ip>}   (string "<us>:<fraction>")
-- ARGV[1]  limit              requests per window at the sustained rate, integer 1..1000000
-- ARGV[2]  window_ms          window length in milliseconds, integer 1..3600000
--                             (limit and burst x window in us at most 2^50: exact arithmetic)
-- ARGV[3]  burst              requests admitted back to back, integer 1..1000000 (usually = limit)
-- ARGV[4]  nonce              unused
-- ARGV[5]  now_us             TESTS ONLY, optional: the time in microseconds instead of Redis TIME
-- ARGV[6]  time_us            optional: Redis TIME in microseconds as the calling script read it
--                             (lua/buy_batch.lua, once for all its limits): used without ARGV[5],
--                             instead of asking Redis again, and without its slack
--
-- Returns {allowed, remaining, retry_after_us, reset_us}:
--   allowed         1 admitted (TAT moved on), 0 refused (nothing is written)
--   remaining       requests still admitted right now after this one
--   retry_after_us  0 when admitted; otherwise the exact wait until a request would be admitted
--   reset_us        wait until the TAT is in the past (the whole burst is available again)
--
-- The algorithm behind redis-cell: each request moves TAT = max(TAT, now) + T on, where
-- T = window / limit is the emission interval, and a request is admitted while
-- TAT - now <= (burst - 1) * T. Exact: T is not a whole number of microseconds in general, so
-- the TAT is kept as microseconds plus a fraction in 1/limit us, and every comparison is made on
-- integers below 2^53 (times in units of 1/limit us relative to now). The key expires when the
-- TAT passes. With ARGV[5] the TTL gets 60 s more, so a test's simulated clock cannot race real
-- expiry.
--
-- Example (20 per second, bursts of 20):
--   sed -e '/^-- @limiter_preamble$/r lua/limiter_preamble.lua' lua/gcra.lua > /tmp/seckill-gcra.lua
--   redis-cli --eval /tmp/seckill-gcra.lua 'seckill:ratelimit:gcra:{127.0.0.1}' , 20 1000 20 -

-- @limiter_preamble
local burst = tonumber(ARGV[3])
local function ceil_div(a, b) return -idiv(-a, b) end

-- ahead: TAT - now in units of 1/limit us (0 when the TAT is not in the future). T is `window`
-- such units, the tolerance (burst - 1) * T is (burst - 1) * window.
local ahead = 0
local stored = redis.call('GET', KEYS[1])
if stored then
  local us, fraction = string.match(stored, '^(%d+):(%d+)$')
  us, fraction = tonumber(us), math.min(tonumber(fraction), limit - 1)
  if us >= now then ahead = (us - now) * limit + fraction end
end
local tolerance = (burst - 1) * window

if ahead <= tolerance then
  ahead = ahead + window
  local whole = idiv(ahead, limit)
  local reset = ceil_div(ahead, limit)
  redis.call('SET', KEYS[1], int(now + whole) .. ':' .. int(ahead - whole * limit),
    'PX', int(idiv(reset, 1000) + 1 + ttl_slack_ms))
  return {1, burst - ceil_div(ahead, window), 0, reset}
end
return {0, 0, ceil_div(ahead - tolerance, limit), ceil_div(ahead, limit)}
