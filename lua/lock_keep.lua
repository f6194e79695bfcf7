-- lock_keep.lua: a lock its owner holds, kept longer or given up, never another owner's (the
-- janitor's round lock, src/retire/janitor.rs, taken with SET NX PX and kept while its round runs).
--
-- KEYS[1]  the lock           seckill:retire-lock
-- ARGV[1]  owner              the value the owner set it to
-- ARGV[2]  ttl_ms             its time to live from now, integer 1..; or 0: give it up (DEL)
--
-- Returns 1 when the caller held the lock (now kept ttl_ms longer, or given up), 0 when it did
-- not (it expired, or another owner took it since): nothing changed.
--
-- Atomic: no other owner's lock is extended or deleted between the check and the write.
--
-- Example (after `redis-cli SET seckill:retire-lock host-8080 NX PX 10000`):
--   redis-cli --eval lua/lock_keep.lua seckill:retire-lock , host-8080 10000

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[2]) == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
