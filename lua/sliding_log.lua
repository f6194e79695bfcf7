-- sliding_log.lua: sliding-window log limiter, one sorted-set member per admitted request.
--
-- KEYS[1]  the client's log   <prefix>:ratelimit:sliding-log:{<client ip>}   (sorted set)
-- ARGV[1]  limit              requests admitted in any window, integer 1..1000000
-- ARGV[2]  window_ms          window length in milliseconds, integer 1..3600000
--                             (limit x window in us at most 2^50: exact arithmetic)
-- ARGV[3]  burst              unused (same arguments for every limiter)
-- ARGV[4]  nonce              unique per request (a UUID): keeps members of one microsecond apart
-- ARGV[5]  now_us             TESTS ONLY, optional: the time in microseconds instead of Redis TIME
-- ARGV[6]  time_us            optional: Redis TIME in microseconds as the calling script read it
--                             (lua/buy_batch.lua, once for all its limits): used without ARGV[5],
--                             instead of asking Redis again, and without its slack
--
-- Returns {allowed, remaining, retry_after_us, reset_us}:
--   allowed         1 admitted (and recorded), 0 refused (nothing is written)
--   remaining       requests still admitted right now after this one
--   retry_after_us  0 when admitted; otherwise the exact wait until a request would be admitted
--   reset_us        wait until the whole limit is available again (the log is empty)
--
-- A request at time t stays in the window while t > now - window. Exact: the window never holds
-- more than `limit` requests, whenever they came; memory is one member per admitted request.
-- The key expires once its newest request has left the window. All arithmetic is on integers
-- below 2^53, so it is exact in Lua's doubles. With ARGV[5] the TTL gets 60 s more, so a test's
-- simulated clock cannot race real expiry.
--
-- Example (20 requests per second):
--   sed -e '/^-- @limiter_preamble$/r lua/limiter_preamble.lua' lua/sliding_log.lua > /tmp/seckill-sliding-log.lua
--   redis-cli --eval /tmp/seckill-sliding-log.lua 'seckill:ratelimit:sliding-log:{127.0.0.1}' , 20 1000 20 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69

-- @limiter_preamble

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(now - window))
local count = redis.call('ZCARD', KEYS[1])
if count < limit then
  local stamp = int(now)
  redis.call('ZADD', KEYS[1], stamp, stamp .. '-' .. ARGV[4])
  redis.call('PEXPIRE', KEYS[1], int(ARGV[2] + 1 + ttl_slack_ms))
  return {1, limit - count - 1, 0, window}
end

-- Refused: the request is admitted once count - limit + 1 of the logged requests have left.
local leaving = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
return {0, 0, tonumber(leaving[2]) + window - now, tonumber(newest[2]) + window - now}
