-- held_floor.lua: raise each buyer's units held in a group (lua/buy.lua's KEYS[7]) to at least the
-- units Postgres holds for the buyer over all the group's sales (reconciliation's repair after a
-- Redis loss, src/reconcile.rs): a buyer whose holdings Redis lost cannot buy past the group's
-- per_buyer in a size repaired before the others.
--
-- KEYS[1]  group's holdings   seckill:{group:<g>}:held  (user id -> units bought in the group's sales)
-- ARGV     pairs: user id, units (its orders' quantities summed over the group's sales in Postgres,
--          released ones too: a release never gives a unit of the limit back), as many as fit one
--          call (the caller sends them in pages)
--
-- Returns the number of buyers whose holdings it raised.
--
-- Invariants kept: a holding is never lowered (units bought since Postgres was read stay counted),
-- so a repeated floor does nothing; a damaged holding is left as it is (lua/buy.lua refuses it).
--
-- Example:
--   redis-cli --eval lua/held_floor.lua 'seckill:{group:kicks}:held' , alice 2 bob 1

local raised = 0
for i = 1, #ARGV, 2 do
  local raw = redis.call('HGET', KEYS[1], ARGV[i])
  local units = tonumber(ARGV[i + 1])
  if not raw or (string.match(raw, '^%d+$') and tonumber(raw) < units) then
    redis.call('HSET', KEYS[1], ARGV[i], units)
    raised = raised + 1
  end
end
return raised
