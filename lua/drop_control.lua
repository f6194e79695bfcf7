-- drop_control.lua: the one switch of a drop (src/drops/): pause, resume or end every size of the
-- drop, and its line, in one call.
--
-- KEYS[1]  group's sales      seckill:{group:<d>}:sales  (the ids of the drop's sizes)
-- KEYS[2]  line meta          seckill:{group:<d>}:line:meta (switched too when it exists)
-- KEYS[3..] each size's meta  seckill:{group:<d>}:sale:<d>.<size>:meta, one per size
-- ARGV[1]  action             "pause", "resume" or "end"
-- ARGV[2]  reason             a pause's reason, kept in each meta's "paused" field ("" for none)
-- ARGV[3..] the sizes' ids    in KEYS' order
--
-- Returns {"ok", paused_before, at_ms} (an action the app never sends: an error reply):
-- paused_before the sizes paused before the call; at_ms Redis TIME, or for an end the end the sizes keep (the latest of their ends: an earlier one is kept, so
-- a drop ended before keeps its end). Or, with nothing written:
--   {"unknown_drop"}            the group has no sales
--   {"sizes_changed"}           the call does not name exactly the group's sales (one was added since
--                               the caller read them: read again and retry)
--   {"size_missing", sale_id}   a size's meta is gone (Redis lost it)
--
-- pause/resume/end act on each meta as lua/control.lua does on a sale's: pause sets "paused" (so
-- lua/purchase.lua refuses every size from the next call on, and lua/admit.lua admits nobody),
-- resume removes it, end sets ends_at_ms to now (an earlier end is kept) and a start after it to
-- 1 ms before. Invariants kept: only the metas change, never a stock or a buyer set; every size
-- switches in the same call, so no purchase of any size sees one size switched and another not.
--
-- Example (after drop_seed.lua's example):
--   redis-cli --eval lua/drop_control.lua 'seckill:{group:kicks}:sales' 'seckill:{group:kicks}:line:meta' 'seckill:{group:kicks}:sale:kicks.40:meta' 'seckill:{group:kicks}:sale:kicks.41:meta' , pause 'price typo' kicks.40 kicks.41

local sizes = #KEYS - 2
local known = redis.call('SCARD', KEYS[1])
if known == 0 then
  return {'unknown_drop'}
end
if known ~= sizes then
  return {'sizes_changed'}
end
for i = 1, sizes do
  if redis.call('SISMEMBER', KEYS[1], ARGV[2 + i]) == 0 then
    return {'sizes_changed'}
  end
  if not redis.call('HGET', KEYS[2 + i], 'stock_initial') then
    return {'size_missing', ARGV[2 + i]}
  end
end
local action = ARGV[1]
if action ~= 'pause' and action ~= 'resume' and action ~= 'end' then
  return redis.error_reply('seckill lua/drop_control.lua: unknown action ' .. tostring(action))
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- An end's time: the latest end a size keeps.
local ended_at = nil
local function switch(meta, size)
  if action == 'pause' then
    redis.call('HSET', meta, 'paused', ARGV[2])
  elseif action == 'resume' then
    redis.call('HDEL', meta, 'paused')
  else
    local ends_at = tonumber(redis.call('HGET', meta, 'ends_at_ms'))
    if not ends_at or ends_at > now_ms then
      ends_at = now_ms
      redis.call('HSET', meta, 'ends_at_ms', string.format('%d', ends_at))
    end
    if size and (not ended_at or ends_at > ended_at) then
      ended_at = ends_at
    end
    local starts_at = tonumber(redis.call('HGET', meta, 'starts_at_ms'))
    if starts_at and starts_at >= ends_at then
      redis.call('HSET', meta, 'starts_at_ms', string.format('%d', ends_at - 1))
    end
  end
end
local paused_before = 0
for i = 1, sizes do
  paused_before = paused_before + redis.call('HEXISTS', KEYS[2 + i], 'paused')
  switch(KEYS[2 + i], true)
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  switch(KEYS[2], false)
end
return {'ok', paused_before, string.format('%d', ended_at or now_ms)}
