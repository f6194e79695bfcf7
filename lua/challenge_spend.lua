-- challenge_spend.lua: spend a proof of work's solution once in its sale (src/challenge/), before
-- a purchase in a sale without a waiting room (a join spends it in lua/queue_join.lua's call).
--
-- KEYS[1]  spent challenges   seckill:{sale:<id>}:challenges  (sorted set: nonce -> expires_ms)
-- ARGV[1]  nonce              the challenge's nonce (32 hex digits; the app checked its signature)
-- ARGV[2]  expires_ms         when the challenge expires, Unix ms: until then its nonce is kept
--
-- Returns 1: spent now; 0: spent before (a replay: refuse it).
--
-- Invariants kept: a nonce is spent once while its challenge can be used (ZADD NX); after that
-- the app refuses the challenge as expired, so the nonce goes: each call drops the nonces whose
-- challenge expired (ZREMRANGEBYSCORE), and the key lives no longer than its last challenge.
--
-- Example:
--   redis-cli --eval lua/challenge_spend.lua 'seckill:{sale:demo}:challenges' , 0f1e2d3c4b5a69788796a5b4c3d2e1f0 4102444800000

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if redis.call('ZADD', KEYS[1], 'NX', ARGV[2], ARGV[1]) == 0 then
  return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) - now_ms then
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
end
return 1
