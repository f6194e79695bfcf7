-- sliding_counter.lua: sliding-window counter, this window's count plus the previous window's,
-- weighted by how much of the previous window the sliding window still covers (one hash).
--
-- KEYS[1]  the client's counters  <prefix>:ratelimit:sliding-counter:{<client ip>}  (hash: s, c, p)
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
--   remaining       requests still admitted right now after this one
--   retry_after_us  0 when admitted; otherwise the exact wait until a request would be admitted
--   reset_us        wait until neither window counts any more (the whole limit is available)
--
-- Windows are [k*window, (k+1)*window) in Redis time; s is the current window's start, c its
-- count, p the previous window's count. At elapsed time e into the window the estimate is
-- p * (window - e) / window + c, and a request is admitted when the estimate plus one is at most
-- `limit`. Compared multiplied by window, on integers below 2^53, so exactly. O(1) memory per
-- client; the estimate assumes the previous window's requests were spread evenly, so it can
-- admit a little more or less than a true sliding log would. With ARGV[5] the TTL gets 60 s
-- more, so a test's simulated clock cannot race real expiry.
--
-- Example (20 requests per second):
--   sed -e '/^-- @limiter_preamble$/r lua/limiter_preamble.lua' lua/sliding_counter.lua > /tmp/seckill-sliding-counter.lua
--   redis-cli --eval /tmp/seckill-sliding-counter.lua 'seckill:ratelimit:sliding-counter:{127.0.0.1}' , 20 1000 20 -

-- @limiter_preamble

local start = idiv(now, window) * window
local state = redis.call('HMGET', KEYS[1], 's', 'c', 'p')
local s, c, p = tonumber(state[1]), tonumber(state[2]) or 0, tonumber(state[3]) or 0
if s == start then
  -- same window
elseif s == start - window then
  p, c = c, 0
else
  p, c = 0, 0
end
local weight = window - (now - start)          -- previous window's share, times window
local budget = limit * window - p * weight     -- room left for this window's count, times window

if (c + 1) * window <= budget then
  c = c + 1
  redis.call('HSET', KEYS[1], 's', int(start), 'c', c, 'p', p)
  local reset = start + 2 * window - now
  redis.call('PEXPIRE', KEYS[1], int(idiv(reset, 1000) + 1 + ttl_slack_ms))
  return {1, idiv(budget, window) - c, 0, reset}
end

local retry_at
if c < limit then
  -- Later in this window: the first e with p * (window - e) <= (limit - c - 1) * window.
  retry_at = start + window - idiv((limit - c - 1) * window, p)
else
  -- In the next window, where this window's c is the previous count.
  retry_at = start + 2 * window - idiv((limit - 1) * window, c)
end
local reset = (c > 0) and (start + 2 * window - now) or (start + window - now)
return {0, 0, retry_at - now, reset}
