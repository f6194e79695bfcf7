-- purchase.lua: the purchase's rules, written once for lua/buy.lua (one purchase) and
-- lua/buy_batch.lua (several in one call). Not a script: each has the line "-- @purchase" where
-- this file goes (crate::redis::lua splices it in; their examples do it with sed).
--
-- Expects, from the including script:
--   KEYS[1..7]  buy.lua's KEYS: the sale's meta, stock, buyers, orders, receipts, queue's buyers
--               (one shard's, for a sharded sale; a drop-admitted purchase's: the drop line's), and
--               the units each buyer holds in the sale's group
--   shards      a local: how many shards the caller believes the sale has (buy.lua's ARGV[4])
-- Reads once, for every purchase of the call: the meta (with lua/control.lua's pause: no extra
-- call), the stock and Redis TIME.
-- Defines:
--   t           that time, Redis TIME's reply (buy_batch.lua gives it to its limits)
--   buy(user, order_id, place, traceparent, quantity, proven)
--               one purchase of `quantity` units (1 when nil or ""), decided and written by buy.lua's
--               rules in buy.lua's order of checks (unknown sale, shard count, buyer, draw mode, admission,
--               proof of work, start, end, limit, pause, stock); place and traceparent "" when there
--               are none; a place is "<n>.<expires_ms>" from a sale's line, "d<n>.<expires_ms>" from a
--               drop's (taken only by a size whose meta has line = "drop", as a plain one only by a
--               sale without it; taken only before its admission's expires_ms, Redis time),
--               "a<n>" a draw's award and "w<n>" its waitlist's offer (lua/draw_award.lua,
--               lua/draw_release.lua: the only purchases a size whose meta has line = "draw"
--               takes; both skip the start check, an award the end too); proven "1" when the app
--               verified and spent a proof of work, else "" or nil. Returns buy.lua's reply, or
--               raises an error (a damaged key) with nothing of the purchase decided. It writes
--               nothing: a purchase it accepts is pending until commit(), and a buyer pending in
--               the call is answered already_purchased ("queued") as a written one would be. The
--               stock it checks is the one read less the units sold before it in the call
--   commit()    writes every pending purchase (issue 54: one XADD, one HSET of receipts, one SADD
--               per call, not per purchase): their one stream entry, receipts, a queued sale's
--               places, buyers and units; returns nil, or the error of a damaged key with nothing
--               of them written and their units out of `sold` (the includer answers each of them
--               "failed"). The includer calls it before it returns
--   buy_now(...) buy() and commit() at once, raising the commit's error
--   sold        the units the call's purchases sold so far: the includer takes them off the stock
--               (DECRBY) before it returns, after commit(), so stock_initial = stock + units sold -
--               units released holds when the call ends (units sold: SCARD(buyers) + the meta's
--               extra_units; units released: SCARD(released) + the meta's extra_released,
--               lua/release.lua's)
--
-- Invariants kept (buy.lua's): the duplicate check comes before any write; the stock is refused at
-- <= 0; XADD, HSET, a queued sale's ZADD and SADD happen together or not at all (Redis does not roll
-- a failed script back, so they go in the order in which only the first three can fail, and each
-- failure deletes what the ones before it wrote). Time comes from the Redis server and is checked
-- before the stock: a shard answers "sold_out" only once it has started. The figures its writes
-- increment are checked with canonical() of lua/canonical.lua, which the line "-- @canonical"
-- below is followed by.

-- @canonical

-- What every purchase of the call reads alike, read once: the sale, its stock, the time.
local meta = redis.call('HMGET', KEYS[1], 'stock_initial', 'starts_at_ms', 'ends_at_ms', 'shards', 'payment_window_ms',
  'queue_rate', 'paused', 'per_buyer', 'group', 'extra_units', 'challenge_cost', 'line', 'restoring', 'queued_extra')
local stock_raw = meta[1] and redis.call('GET', KEYS[2])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local verdict -- the answer every purchase of the call gets before its buyer is looked at, if any
if not stock_raw then
  verdict = 'unknown_sale'
elseif (tonumber(meta[4]) or 1) ~= tonumber(shards) then
  verdict = 'wrong_shards'
end
-- A size of a drop in draw mode: its units go to the draw's winners only, each awarded by
-- lua/draw_award.lua with a place "a<n>", or offered to its waitlist by lua/draw_release.lua with
-- "w<n>" (the app builds neither from a buyer's input); any other purchase of it is answered
-- "draw_only". Both skip the start check (the size may open later than the draw). An award skips
-- the end too: its winners were drawn when the entries closed, and a run refused for good by an
-- end (an operator's, or one at the close) would never award them nor reveal the seed. An offer
-- keeps the end: an ended drop's units come back to its stock.
local draw_sale = meta[12] == 'draw'
local queued_sale = meta[6]
-- A size of a drop with a line (src/admission/): only the drop's line admits to it, with a place
-- marked "d<place>"; a sale's own line admits with a plain place. Neither passes for the other.
-- Either carries its admission's end, ".<expires_ms>" (Redis time, signed in the buyer's token):
-- the admission is checked against this call's TIME, the clock lua/admit.lua admits by, never an
-- instance's, so no instance lets a buyer in after their window let the next one in.
local place_pattern = meta[12] == 'drop' and '^d(%d+)%.(%d+)$' or '^(%d+)%.(%d+)$'
-- A sale that asks a proof of work (src/challenge/) and has no waiting room (whose join asked it).
local challenged = meta[11] and not queued_sale
-- lua/control.lua's pause: the reason (maybe ""), or false; a sale the repair is restoring
-- (lua/seed.lua's hold) refuses purchases alike, whatever an operator resumes meanwhile.
local paused = meta[7] or meta[13]
local starts_at, ends_at = tonumber(meta[2]), tonumber(meta[3])
local timing
if starts_at and now_ms < starts_at then
  timing = 'not_started'
elseif ends_at and now_ms >= ends_at then
  timing = 'ended'
end
-- DECR/DECRBY take only a canonical integer ("0", or no leading zero) of at most 18 characters
-- here, so the includer's cannot fail; any other stock is damaged.
local stock
if stock_raw and canonical(stock_raw, true) then
  stock = tonumber(stock_raw)
end
-- The units one buyer may take: in the sale, or across its group's sales (every sale of a group
-- records the group's per_buyer, lua/seed.lua); a grouped sale counts them in KEYS[7].
local per_buyer = tonumber(meta[8]) or 1
local grouped = meta[9]
-- HINCRBY, like DECRBY, takes only a canonical integer ("0", or no leading zero or sign "-0") of
-- at most 18 characters here: a damaged extra_units is found before any write.
local extra_ok = not meta[10] or canonical(meta[10], false)
-- Nor can a damaged queued_extra fail the commit's HINCRBY after its other writes (it can be
-- negative: a repair's seed restarts it while entries of several orders are queued).
local queued_extra_ok = not meta[14] or canonical(meta[14], true)
local created_at = string.format('%d', now_ms)
local window = tonumber(meta[5])
local pay_by = window and string.format('%d', now_ms + window)
local sold = 0
-- The purchases decided and not written yet, in order (commit() writes them), and each by buyer.
local pending, pending_of = {}, {}

-- One purchase, its stock being what the purchases before it in the call left.
local function buy(user, order_id, place_arg, traceparent, quantity, proven)
  local q = tonumber(quantity) or 1 -- the app validated 1..100
  if verdict then
    return verdict
  end
  -- A buyer hears of their order before any gate (the draw, the line, the proof, the sale's
  -- hours): a retry of a purchase whose answer was lost learns that it bought, whenever it asks.
  local before = pending_of[user]
  if before then
    -- Bought earlier in this call: its receipt is not written yet, its order will be queued.
    return {'already_purchased', before.order, created_at, 'queued', tostring(before.q)}
  end
  if redis.call('SISMEMBER', KEYS[3], user) == 1 then
    local receipt = redis.call('HGET', KEYS[5], user)
    if not receipt then
      return {'already_purchased'}
    end
    local order, at, entry, units = string.match(receipt, '^(%S+) (%S+) (%S+) ?(%d*)$')
    local queued = #redis.call('XRANGE', KEYS[4], entry, entry) > 0
    return {'already_purchased', order, at, queued and 'queued' or 'confirmed', units ~= '' and units or '1'}
  end
  local award = draw_sale and string.match(place_arg or '', '^[aw](%d+)$')
  local run_award = award and string.sub(place_arg, 1, 1) == 'a'
  if draw_sale and not award then
    return 'draw_only'
  end
  local place, expires
  if queued_sale then
    place, expires = string.match(place_arg or '', place_pattern)
    place, expires = tonumber(place), tonumber(expires)
    if not place then
      return 'not_admitted'
    end
    if now_ms >= expires then
      return 'admission_expired'
    end
  end
  if challenged and proven ~= '1' then
    return 'challenge_required'
  end
  if timing and not (award and (timing == 'not_started' or run_award)) then
    return timing
  end
  local held = 0
  if grouped then
    local raw = redis.call('HGET', KEYS[7], user)
    if raw and not string.match(raw, '^%d+$') then
      error('seckill lua/purchase.lua: the units the buyer holds in the group are damaged (' .. raw .. '): nothing written')
    end
    held = tonumber(raw) or 0
  end
  if held + q > per_buyer then
    return {'limit_reached', tostring(held), tostring(per_buyer)}
  end
  if paused then
    return 'paused'
  end
  if not stock then
    error('seckill lua/purchase.lua: the stock of the sale is damaged (' .. stock_raw .. '): nothing written')
  end
  if q > 1 and not extra_ok then
    error('seckill lua/purchase.lua: the extra_units of the sale is damaged (' .. meta[10] .. '): nothing written')
  end
  if stock - sold <= 0 then
    return 'sold_out'
  end
  if stock - sold < q then
    return {'insufficient_stock', tostring(stock - sold)}
  end
  local bought = {user = user, order = order_id, q = q, place = place, traceparent = traceparent, held = held}
  pending[#pending + 1] = bought
  pending_of[user] = bought
  sold = sold + q
  if pay_by then
    return {'reserved', pay_by}
  end
  return 'ok'
end

-- The stream entry of the purchases `written`, as XADD's fields after the id. One purchase: its
-- order id and buyer, then the quantity when over 1, the payment deadline and the trace context,
-- if any. Several: "orders", one line each ("<order id> <quantity> <traceparent or -> <buyer>":
-- a buyer has no control character), then the deadline, the call's alike.
local function entry_fields(written)
  local fields
  if #written == 1 then
    local p = written[1]
    fields = {'order_id', p.order, 'user_id', p.user}
    if p.q > 1 then
      fields[#fields + 1], fields[#fields + 2] = 'quantity', tostring(p.q)
    end
    if pay_by then
      fields[#fields + 1], fields[#fields + 2] = 'pay_by_ms', pay_by
    end
    if p.traceparent ~= '' then
      fields[#fields + 1], fields[#fields + 2] = 'traceparent', p.traceparent
    end
    return fields
  end
  local lines = {}
  for i, p in ipairs(written) do
    local trace = (p.traceparent ~= '' and p.traceparent) or '-'
    lines[i] = p.order .. ' ' .. p.q .. ' ' .. trace .. ' ' .. p.user
  end
  fields = {'orders', table.concat(lines, '\n')}
  if pay_by then
    fields[3], fields[4] = 'pay_by_ms', pay_by
  end
  return fields
end

-- Writes every pending purchase at once: one stream entry, the receipts in one HSET, a queued
-- sale's places in one ZADD, the buyers in one SADD, the units over one in one HINCRBY (and the
-- orders over one entry's first in another: the meta's queued_extra), the group's holdings in
-- one HSET. The entry's id carries the call's time; the time goes in a field
-- only when the stream's last entry is later (the server's clock went back). Returns nil, or the
-- error of a damaged key: then nothing of them is written and `sold` no longer counts them. Only
-- the first three writes can fail, so each failure deletes what the ones before it wrote.
local function commit()
  if #pending == 0 then
    return nil
  end
  local written = pending
  pending, pending_of = {}, {}
  if #written > 1 and not queued_extra_ok then
    for _, p in ipairs(written) do
      sold = sold - p.q
    end
    return 'seckill lua/purchase.lua: the queued_extra of the sale is damaged (' .. meta[14] .. '): nothing written'
  end
  local fields = entry_fields(written)
  local entry = redis.pcall('XADD', KEYS[4], created_at .. '-*', unpack(fields))
  if type(entry) == 'table' and entry.err then
    local after = #written == 1 and 5 or 3 -- after the order id and buyer, or the orders
    table.insert(fields, after, 'created_at_ms')
    table.insert(fields, after + 1, created_at)
    entry = redis.pcall('XADD', KEYS[4], '*', unpack(fields))
  end
  local failed = type(entry) == 'table' and entry.err
  local receipts, places, users, holdings, extra = {}, {}, {}, {}, 0
  for i, p in ipairs(written) do
    local kept = p.order .. ' ' .. created_at .. ' ' .. tostring(entry)
    if p.q > 1 then
      kept = kept .. ' ' .. p.q
      extra = extra + p.q - 1
    end
    receipts[2 * i - 1], receipts[2 * i] = p.user, kept
    users[i] = p.user
    if p.place then
      places[#places + 1], places[#places + 2] = p.place, p.user
    end
    if grouped then
      holdings[2 * i - 1], holdings[2 * i] = p.user, tostring(p.held + p.q)
    end
  end
  if not failed then
    local receipt = redis.pcall('HSET', KEYS[5], unpack(receipts))
    failed = type(receipt) == 'table' and receipt.err
    if failed then
      redis.call('XDEL', KEYS[4], entry)
    end
  end
  if not failed and #places > 0 then
    local used = redis.pcall('ZADD', KEYS[6], unpack(places))
    failed = type(used) == 'table' and used.err
    if failed then
      redis.call('XDEL', KEYS[4], entry)
      redis.call('HDEL', KEYS[5], unpack(users))
    end
  end
  if failed then
    for _, p in ipairs(written) do
      sold = sold - p.q
    end
    return 'seckill lua/purchase.lua: a key of the sale is damaged (' .. failed .. '): nothing written'
  end
  redis.call('SADD', KEYS[3], unpack(users))
  if extra > 0 then
    redis.call('HINCRBY', KEYS[1], 'extra_units', extra)
  end
  if #written > 1 then
    -- The stream holds #written orders in one entry: the queue's length is XLEN + queued_extra
    -- (lua/trim.lua takes them out again with the entry).
    redis.call('HINCRBY', KEYS[1], 'queued_extra', #written - 1)
  end
  if grouped then
    redis.call('HSET', KEYS[7], unpack(holdings))
  end
  return nil
end

-- A purchase written at once: buy() then commit(), the commit's error raised (with nothing of the
-- purchase written), for the callers that write each purchase as it comes (lua/buy.lua, a draw's
-- awards and offers).
local function buy_now(user, order_id, place, traceparent, quantity, proven)
  local reply = buy(user, order_id, place, traceparent, quantity, proven)
  local failed = commit()
  if failed then
    error(failed)
  end
  return reply
end
