-- trim.lua: delete the order stream's entries the consumer group is done with.
--
-- KEYS[1]  order stream       seckill:{sale:<id>}:orders
-- ARGV[1]  consumer group
--
-- Returns the number of entries deleted (0 when the stream or the group does not exist).
--
-- The worker acknowledges (XACK) a batch only after its Postgres commit, then calls this. An
-- entry is done with once the group has delivered it and it is no longer pending. So the stream
-- is trimmed (XTRIM MINID, exact) up to the oldest pending entry or, when none is pending, past
-- the group's last delivered entry: an entry not yet delivered, or pending, is never deleted. An
-- acknowledged entry behind one still pending (another consumer's batch) stays until that one is
-- acknowledged too, so XLEN is the orders not yet committed plus, briefly, such entries: never
-- fewer than the queue, and exactly it once the consumers catch up. One XTRIM per batch costs
-- Redis far less than an XDEL of every entry.
--
-- Example (after buy.lua's example: nothing delivered yet, so nothing is deleted):
--   redis-cli --eval lua/trim.lua 'seckill:{sale:demo}:orders' , seckill-workers

local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if groups.err then
  return 0
end
local delivered
for _, group in ipairs(groups) do
  local name, last
  for i = 1, #group, 2 do
    if group[i] == 'name' then
      name = group[i + 1]
    elseif group[i] == 'last-delivered-id' then
      last = group[i + 1]
    end
  end
  if name == ARGV[1] then
    delivered = last
  end
end
if not delivered then
  return 0
end

local pending = redis.call('XPENDING', KEYS[1], ARGV[1])
local bound
if pending[1] > 0 then
  bound = pending[2]
else
  local ms, seq = string.match(delivered, '^(%d+)-(%d+)$')
  bound = ms .. '-' .. string.format('%.0f', tonumber(seq) + 1)
end
return redis.call('XTRIM', KEYS[1], 'MINID', bound)
