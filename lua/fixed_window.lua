-- fixed_window.lua: fixed-window counter, windows aligned to the clock (INCR-style, one hash).
--
-- KEYS[1]  the client's counter  <prefix>:ratelimit:fixed-window:{<client ip>}  (hash: s, n)
-- ARGV[1]  limit              requests admitted per window, integer 1..1000000
-- ARGV[2]  window_ms          window length in milliseconds, integer 1..3600000
--                             (limit x window in us at most 2^50: exact arithmetic)
-- ARGV[3]  burst              unused (same arguments for every limiter)
-- ARGV[4]  nonce              unused
-- ARGV[5]  now_us             TESTS ONLY, optional: the time in microseconds instead of Redis TIME
-- ARGV[6]  time_us            optional: Redis TIME in microseconds as the calling script read it
--                             (lua/buy_batch.lua, once for all its limits): used without ARGV[5],
--                             instead of asking Redis again, and without its slack
--
-- Returns {allowed, remaining, retry_after_us, reset_us}:
--   allowed         1 admitted (and counted), 0 refused (nothing is written)
--   remaining       requests still admitted in this window after this one
--   retry_after_us  0 when admitted; otherwise the wait until the next window starts
--   reset_us        wait until the next window starts (the whole limit is available again)
--
-- Windows are [k*window, (k+1)*window) in Redis time; the hash keeps the current window's start
-- (s) and its count (n), so a count from an earlier window is never mistaken for this one's.
-- Cheapest of the five, and the one with the known edge burst: `limit` requests at the end of
-- one window and `limit` more at the start of the next are all admitted, 2 x limit within
-- moments. The key expires when its window ends. With ARGV[5] the TTL gets 60 s more, so a
-- test's simulated clock cannot race real expiry.
--
-- Example (20 requests per second):
--   sed -e '/^-- @limiter_preamble$/r lua/limiter_preamble.lua' lua/fixed_window.lua > /tmp/seckill-fixed-window.lua
--   redis-cli --eval /tmp/seckill-fixed-window.lua 'seckill:ratelimit:fixed-window:{127.0.0.1}' , 20 1000 20 -

-- @limiter_preamble

local start = idiv(now, window) * window
local reset = start + window - now
local state = redis.call('HMGET', KEYS[1], 's', 'n')
local n = 0
if tonumber(state[1]) == start then n = tonumber(state[2]) end
if n >= limit then
  return {0, 0, reset, reset}
end
redis.call('HSET', KEYS[1], 's', int(start), 'n', n + 1)
redis.call('PEXPIRE', KEYS[1], int(idiv(reset, 1000) + 1 + ttl_slack_ms))
return {1, limit - n - 1, 0, reset}
