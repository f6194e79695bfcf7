-- challenge_spend.lua: spend a proof of work's solution once in its sale (src/challenge/), before
-- a purchase in a sale without a waiting room (a join spends it in lua/queue_join.lua's call).
--
-- KEYS[1]  spent challenges   seckill:{sale:<id>}:challenges  (sorted set: nonce -> expires_ms)
-- ARGV[1]  nonce              the challenge's nonce (32 hex digits; the app checked its signature)
-- ARGV[2]  expires_ms         when the challenge expires, Unix ms: until then its nonce is kept
--
-- Returns 1: spent now; 0: spent before (a replay: refuse it), or its challenge has expired on the
-- Redis clock.
--
-- Invariants kept: lua/nonce_spend.lua's (a nonce spent once while its challenge can be used; the
-- nonces of expired challenges dropped).
--
-- Assembled, not run as it stands: the line "-- @nonce_spend" below is followed by lua/nonce_spend.lua.
--
-- Example:
--   sed -e '/^-- @nonce_spend$/r lua/nonce_spend.lua' lua/challenge_spend.lua > /tmp/seckill-challenge-spend.lua
--   redis-cli --eval /tmp/seckill-challenge-spend.lua 'seckill:{sale:demo}:challenges' , 0f1e2d3c4b5a69788796a5b4c3d2e1f0 4102444800000

-- @nonce_spend

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return spend_nonce(KEYS[1], ARGV[1], ARGV[2], now_ms) and 1 or 0
