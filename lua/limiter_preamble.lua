-- limiter_preamble.lua: the opening every limiter script shares (lua/sliding_log.lua,
-- sliding_counter.lua, fixed_window.lua, token_bucket.lua, gcra.lua), written once. Not a script:
-- each limiter has the line "-- @limiter_preamble" where this file goes (crate::redis::lua
-- splices it in; each limiter's example does it with sed).
--
-- Reads the limiter's ARGV (the limiter's own contract): ARGV[1] limit, ARGV[2] window_ms,
-- ARGV[5] now_us (tests only), ARGV[6] time_us (the calling script's reading of Redis TIME).
-- Defines:
--   limit         ARGV[1] as a number
--   window        ARGV[2] in microseconds
--   now           the time in microseconds: ARGV[5], else ARGV[6], else Redis TIME
--   ttl_slack_ms  60000 with ARGV[5] (a test's simulated clock cannot race real expiry), else 0
--   int(x)        an integer below 2^53 as its decimal string
--   idiv(a, b)    floor(a / b) for integers below 2^53 and b > 0, exactly
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local now = tonumber(ARGV[5])
local ttl_slack_ms = now and 60000 or 0
now = now or tonumber(ARGV[6])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- Integers below 2^53 only (all a limiter writes): '%d' prints them exactly, and faster than '%.0f'.
local function int(x) return string.format('%d', x) end
-- floor(a / b) for integers below 2^53 and b > 0, corrected for the rounding of a / b.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then return q - 1 end
  if (q + 1) * b <= a then return q + 1 end
  return q
end
