-- fill-buyers.lua: synthetic buyers for `cargo xtask bench`'s flatness row (a sale whose buyer set
-- already holds millions of members). One call adds the users f-FROM .. f-(TO - 1) to the buyer
-- set, each with a receipt (the per-buyer state buy.lua keeps), 1,000 per SADD and HSET, and
-- raises the meta's stock_initial by as many as were new, so stock_initial = stock + SCARD(buyers)
-- holds after every call and the stock left is untouched. (The admin API seeds at most 10,000,000
-- items: a sale with 10 million buyers and stock to spare exists only this way; the caller raises
-- the Postgres `sales` row's stock_initial to match.)
--
-- KEYS[1]  buyer set          <prefix>:{sale:<id>}:buyers
-- KEYS[2]  receipts hash      <prefix>:{sale:<id>}:receipts
-- KEYS[3]  sale meta hash     <prefix>:{sale:<id>}:meta
-- ARGV[1]  FROM               first user number (inclusive)
-- ARGV[2]  TO                 last user number (exclusive)
--
-- Returns SCARD of the buyer set afterwards. The buyers are synthetic: no order in the stream or in
-- Postgres, and a receipt whose order id (00000000-0000-7000-8000-<n, 12 digits>) and stream entry
-- (1-<n>) name no real order; nobody named f-<n> buys in the bench. The bench adds 20,000 users per
-- call: about 0.2 s each, well below the app's Redis timeout, so its worker is not stalled.
--
-- Example:
--   redis-cli --eval load-tests/lib/fill-buyers.lua 'bench:{sale:s}:buyers' 'bench:{sale:s}:receipts' 'bench:{sale:s}:meta' , 0 100000

local from, to = tonumber(ARGV[1]), tonumber(ARGV[2])
local before = redis.call('SCARD', KEYS[1])
local members, receipts, n = {}, {}, 0
for i = from, to - 1 do
  n = n + 1
  local user = 'f-' .. i
  members[n] = user
  receipts[2 * n - 1] = user
  receipts[2 * n] = string.format('00000000-0000-7000-8000-%012d 1700000000000 1-%d', i, i)
  if n == 1000 or i == to - 1 then
    redis.call('SADD', KEYS[1], unpack(members, 1, n))
    redis.call('HSET', KEYS[2], unpack(receipts, 1, 2 * n))
    n = 0
  end
end
local after = redis.call('SCARD', KEYS[1])
redis.call('HINCRBY', KEYS[3], 'stock_initial', after - before)
return after
