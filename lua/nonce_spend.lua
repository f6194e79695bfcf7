-- nonce_spend.lua: a proof of work's solution spent once, written once for lua/challenge_spend.lua
-- (a purchase's), lua/queue_join.lua (a join's) and lua/draw_enter.lua (an entry's). Not a script:
-- each has the line "-- @nonce_spend" where this file goes (crate::redis::lua splices it in; their
-- examples do it with sed).
--
-- Defines:
--   spend_nonce(key, nonce, expires_ms, now_ms)
--               true when the nonce is spent now, false when it was spent before (a replay: the
--               includer refuses it) or its challenge has expired on the Redis clock. key is the
--               sorted set of spent nonces (nonce -> expires_ms), expires_ms when the challenge
--               expires (Unix ms), now_ms the Redis time.
--
-- Invariants kept: a nonce is spent once while its challenge can be used (ZADD NX); after that the
-- challenge is refused as expired, here on the Redis clock whatever the instance's clock said (an
-- instance behind Redis would otherwise spend again a nonce trimmed as expired, and set no TTL), so
-- the nonce goes: each call drops the nonces whose challenge expired (ZREMRANGEBYSCORE), and the
-- key lives no longer than its last challenge.
local function spend_nonce(key, nonce, expires_ms, now_ms)
  if tonumber(expires_ms) <= now_ms then
    return false
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
  if redis.call('ZADD', key, 'NX', expires_ms, nonce) == 0 then
    return false
  end
  if redis.call('PTTL', key) < tonumber(expires_ms) - now_ms then
    redis.call('PEXPIREAT', key, expires_ms)
  end
  return true
end
