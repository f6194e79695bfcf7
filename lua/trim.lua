-- trim.lua: delete the order stream's entries the consumer group is done with.
--
-- KEYS[1]  order stream       seckill:{sale:<id>}:orders
-- KEYS[2]  optional: the sale's meta (an order stream's, seckill:{sale:<id>}:meta): its field
--          queued_extra counts the orders beyond one per entry of the stream (lua/purchase.lua's
--          commit() adds a call's, issue 54); the orders of the entries deleted leave it
-- ARGV[1]  consumer group
--
-- An emptied stream holds no order beyond its entries: queued_extra is then cleared, so a count
-- that drifted (a meta seeded again by a repair while entries of several orders were queued) ends
-- with the stream's last entry.
--
-- Returns the number of entries deleted (0 when the stream or the group does not exist). At most
-- 1,000 a call (the caller, src/redis/order_stream.rs, calls again for the rest), so a stream left
-- untrimmed for long never holds Redis for long.
--
-- The worker acknowledges (XACK) a batch only after its Postgres commit, then calls this. An
-- entry is done with once the group has delivered it and it is no longer pending. So the stream
-- is trimmed (XTRIM MINID, exact) up to the oldest pending entry or, when none is pending, past
-- the group's last delivered entry: an entry not yet delivered, or pending, is never deleted. An
-- acknowledged entry behind one still pending (another consumer's batch) stays until that one is
-- acknowledged too, so XLEN (with the meta's queued_extra: the orders) is the orders not yet
-- committed plus, briefly, such entries' orders: never fewer than the queue, and exactly it once
-- the consumers catch up. One XTRIM per batch costs
-- Redis far less than an XDEL of every entry.
--
-- Example (after buy.lua's example: nothing delivered yet, so nothing is deleted):
--   redis-cli --eval lua/trim.lua 'seckill:{sale:demo}:orders' 'seckill:{sale:demo}:meta' , seckill-workers

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
-- The entries to delete, at most 1,000: each of several orders takes its lines beyond the first
-- out of the meta's queued_extra (while the meta exists: a lost sale's left entries only drain).
local gone = redis.call('XRANGE', KEYS[1], '-', '(' .. bound, 'COUNT', 1000)
if #gone == 1000 then
  local ms, seq = string.match(gone[1000][1], '^(%d+)-(%d+)$')
  bound = ms .. '-' .. string.format('%.0f', tonumber(seq) + 1)
end
if KEYS[2] then
  local extra = 0
  for _, entry in ipairs(gone) do
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'orders' then
        local _, breaks = string.gsub(fields[i + 1], '\n', '')
        extra = extra + breaks
      end
    end
  end
  if extra > 0 and redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('HINCRBY', KEYS[2], 'queued_extra', -extra)
  end
end
local deleted = redis.call('XTRIM', KEYS[1], 'MINID', bound)
if KEYS[2] and redis.call('XLEN', KEYS[1]) == 0 then
  redis.call('HDEL', KEYS[2], 'queued_extra')
end
return deleted
