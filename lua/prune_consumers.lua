-- prune_consumers.lua: remove the consumers of an order stream's group that are idle past the
-- claim timeout and hold nothing pending (the workers of past deploys and dead hosts).
--
-- KEYS[1]  order stream       seckill:{sale:<id>}:orders
-- ARGV[1]  consumer group
-- ARGV[2]  idle threshold, ms (the claim timeout): only consumers idle longer are removed
-- ARGV[3]  a consumer never removed (the caller's own name)
--
-- Returns the names of the consumers removed (none when the key is no stream or has no such
-- group).
--
-- Atomic: between the check and XGROUP DELCONSUMER no consumer can be handed an entry, so no
-- pending entry is ever dropped with its consumer (DELCONSUMER forgets a consumer's pending
-- entries). A live worker removed anyway (idle that long: it read nothing for the whole claim
-- timeout) is created again by its next XREADGROUP.
--
-- Example (threshold 10 ms: every consumer idle longer with nothing pending goes, but host-8080):
--   redis-cli --eval lua/prune_consumers.lua 'seckill:{sale:demo}:orders' , seckill-workers 10 host-8080

if redis.call('TYPE', KEYS[1]).ok ~= 'stream' then
  return {}
end
local consumers = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if consumers.err then
  return {}
end
local idle_limit = tonumber(ARGV[2])
local removed = {}
for _, consumer in ipairs(consumers) do
  local fields = {}
  for i = 1, #consumer, 2 do
    fields[consumer[i]] = consumer[i + 1]
  end
  if fields['name'] ~= ARGV[3] and tonumber(fields['pending']) == 0 and tonumber(fields['idle']) > idle_limit then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], fields['name'])
    removed[#removed + 1] = fields['name']
  end
end
return removed
