-- sliding_window.lua: per-client sliding-window log rate limiter on a sorted set.
--
-- KEYS[1]  the client's log   seckill:ratelimit:{<client ip>}
-- ARGV[1]  limit              (requests admitted per window, integer >= 1)
-- ARGV[2]  window_ms          (window length in milliseconds, integer >= 1)
-- ARGV[3]  nonce              (unique per request, e.g. a UUID; keeps members distinct)
--
-- Returns {allowed, remaining, retry_after_ms}:
--   allowed         1 when the request is admitted (and recorded), 0 when refused
--   remaining       requests still admitted in the current window after this one
--   retry_after_ms  0 when admitted; otherwise when the oldest admitted request leaves the window
--
-- Invariants kept: time is the Redis server's (TIME), never the caller's; each admitted request is
-- its own member ("<microseconds>-<nonce>"), so two requests in one millisecond are two entries;
-- refused requests are not recorded; the key expires one window after the last admitted request,
-- so idle clients cost nothing. One key per call, so it runs on Redis Cluster.
--
-- Example (20 requests per second):
--   redis-cli --eval lua/sliding_window.lua 'seckill:ratelimit:{127.0.0.1}' , 20 1000 0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69

local limit = tonumber(ARGV[1])
local window_us = tonumber(ARGV[2]) * 1000
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_us - window_us)
local count = redis.call('ZCARD', KEYS[1])
if count < limit then
  redis.call('ZADD', KEYS[1], now_us, now_us .. '-' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, limit - count - 1, 0}
end

local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local retry_us = tonumber(oldest[2]) + window_us - now_us
return {0, 0, math.max(1, math.ceil(retry_us / 1000))}
