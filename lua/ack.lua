-- ack.lua: acknowledge and delete stream entries whose orders are committed in Postgres.
--
-- KEYS[1]  order stream       seckill:{sale:<id>}:orders
-- ARGV[1]  consumer group
-- ARGV[2..n]  stream entry ids
--
-- Returns the number of entries acknowledged (XACK's count).
--
-- Invariant kept: acknowledging and deleting happen together, so XLEN of the stream is exactly
-- the number of confirmed orders not yet committed to Postgres (the "queued" figure), and the
-- stream does not grow without bound. Called only after the Postgres commit.
--
-- Example (acks nothing when the id is not pending):
--   redis-cli --eval lua/ack.lua 'seckill:{sale:demo}:orders' , seckill-workers 0-1

local ids = {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then
  return 0
end
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
redis.call('XDEL', KEYS[1], unpack(ids))
return acked
