-- challenge_count.lua: count one more challenge issued to a client address, and say how many it
-- took in the last minute (src/challenge/: the cost of the next one grows with that count).
--
-- KEYS[1]  the address's counts   <prefix>:challenges:{<client address>}  (hash: s, c, p)
--
-- Returns the estimate, an integer >= 1: this one included, the challenges of the last 60 s,
-- counted as lua/sliding_counter.lua counts (windows of a minute in Redis time; s the current
-- window's start in ms, c its count, p the previous window's; the estimate is
-- ceil(p * (60000 - e) / 60000) + c at e ms into the window). Nothing refuses: the count only
-- prices the work. O(1) memory per address, gone 2 minutes after its last challenge.
--
-- Example:
--   redis-cli --eval lua/challenge_count.lua 'seckill:challenges:{127.0.0.1}'

local window = 60000
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local start = now_ms - now_ms % window
local h = redis.call('HMGET', KEYS[1], 's', 'c', 'p')
local s, c, p = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0
if s ~= start then
  -- A new window: the one before it is the previous window only if it was the last one.
  if s == start - window then p = c else p = 0 end
  c = 0
end
c = c + 1
redis.call('HSET', KEYS[1], 's', start, 'c', c, 'p', p)
redis.call('PEXPIRE', KEYS[1], 2 * window)
return math.ceil(p * (window - (now_ms - start)) / window) + c
