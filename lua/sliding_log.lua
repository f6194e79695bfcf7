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
-- ARGV[7]  memo               optional, only from a calling script (lua/buy_batch.lua): a Lua table
--                             this script keeps what it learned of each key in, for the call's
--                             later checks of the same key (one address's many purchases): a key
--                             pruned at this time is not pruned again, counted again, nor given its
--                             TTL again (the same decisions, fewer commands)
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

-- The count in the window: what this call's memo knows (the key pruned at this same time before,
-- and counted since), else the log's size, less what left it (nothing to prune in a new log).
local memo = type(ARGV[7]) == 'table' and ARGV[7]
local known = memo and memo[KEYS[1]]
local fresh = known and known.now == now and known.window == window
local count
if fresh then
  count = known.count
else
  count = redis.call('ZCARD', KEYS[1])
  if count > 0 then
    count = count - redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(now - window))
  end
end
if count < limit then
  local stamp = int(now)
  redis.call('ZADD', KEYS[1], stamp, stamp .. '-' .. ARGV[4])
  -- The TTL is relative to the server's time, which stands still in a script: set once per key a
  -- call, by its first admission.
  if not (fresh and known.expires) then
    redis.call('PEXPIRE', KEYS[1], int(ARGV[2] + 1 + ttl_slack_ms))
  end
  if memo then
    memo[KEYS[1]] = {now = now, window = window, count = count + 1, expires = true}
  end
  return {1, limit - count - 1, 0, window}
end
if memo then
  memo[KEYS[1]] = {now = now, window = window, count = count, expires = fresh and known.expires}
end

-- Refused: the request is admitted once count - limit + 1 of the logged requests have left.
local leaving = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
return {0, 0, tonumber(leaving[2]) + window - now, tonumber(newest[2]) + window - now}
