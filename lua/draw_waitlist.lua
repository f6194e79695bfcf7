-- draw_waitlist.lua: a draw's waitlist put in Redis by the draw's run (src/draw/run/), in chunks,
-- before it awards any winner, so that every unit that comes back after the draw finds it
-- (lua/draw_release.lua offers it there first).
--
-- KEYS[1]     waitlist        seckill:{group:<d>}:draw:waitlist (hash: place -> "<quantity> <sizes
--                             comma-joined> <state> <user>", state "w" while waiting, then
--                             "o:<size>:<order id>" once offered, or "s" when it could not take one)
-- KEYS[2..]   waiting places  seckill:{group:<d>}:draw:waitlist:<size>, one per size (sorted set:
--                             place -> place), in the order of ARGV[2..]
-- ARGV[1]     s               how many sizes follow (#KEYS - 1)
-- ARGV[2..s+1]                the sizes' short names, in KEYS' order
-- then for each place: its number (1 first), the user id, its quantity, its sizes comma-joined
--                             (each one of the names above)
--
-- Returns how many places were written now: a place written before (an interrupted run's, maybe
-- offered since) is left as it is, so a re-run never puts an offered place back on the list.
-- Raises, with nothing written, when a place lists a size not in KEYS (the app sends none).
--
-- Invariants kept: a place is in a size's sorted set only while its state is "w", and only if it
-- listed that size; the hash is the gate (HSETNX), so running a chunk twice writes it once. The
-- keys share the drop's hash tag; they go with the drop (src/retire.rs).
--
-- Example (a waitlist of one place, bob's, for sizes 41 then 40, one unit):
--   redis-cli --eval lua/draw_waitlist.lua 'seckill:{group:kicks}:draw:waitlist' 'seckill:{group:kicks}:draw:waitlist:40' 'seckill:{group:kicks}:draw:waitlist:41' , 2 40 41 1 bob 1 41,40

local s = tonumber(ARGV[1])
local key_of = {}
for i = 1, s do
  key_of[ARGV[1 + i]] = KEYS[1 + i]
end
-- Every place's sizes are checked before anything is written.
for i = s + 5, #ARGV, 4 do
  for size in string.gmatch(ARGV[i], '[^,]+') do
    if not key_of[size] then
      error('seckill lua/draw_waitlist.lua: place ' .. ARGV[i - 3] .. ' lists the size ' .. size .. ', not in KEYS')
    end
  end
end
local written = 0
for i = s + 2, #ARGV, 4 do
  local place, user, quantity, sizes = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('HSETNX', KEYS[1], place, quantity .. ' ' .. sizes .. ' w ' .. user) == 1 then
    written = written + 1
    for size in string.gmatch(sizes, '[^,]+') do
      redis.call('ZADD', key_of[size], place, place)
    end
  end
end
return written
