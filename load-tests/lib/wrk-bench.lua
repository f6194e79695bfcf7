-- wrk script for `cargo xtask bench` (and ab, shard-ceiling): one script for every HTTP row, so the generator does the
-- same work per request in each of them (one Lua request() call, one response() call).
--
--   wrk -t2 -c64 -d6s --latency -s load-tests/lib/wrk-bench.lua URL -- MODE [SALE_ID USER_PREFIX]
--
-- MODE healthz  GET /healthz (a request string built once)
-- MODE sale     GET /sales/SALE_ID, the public status a waiting crowd polls (a request string built
--               once, without If-None-Match: every answer is a 200 with its body)
-- MODE buy      POST /buy {"sale_id":"SALE_ID","user_id":"USER_PREFIX-<counter>-<thread>"}: every
--               request a new user, unique across wrk threads (thread number in the id) and
--               across runs on the same sale (pick a new USER_PREFIX per run)
-- MODE buy-sales POST /buy {"sale_id":"SALE_PREFIX-<k>","user_id":"USER_PREFIX-<counter>-<thread>"}: as buy,
--               but spread over SALES sales: args SALE_PREFIX SALES USER_PREFIX THREADS; request n of
--               thread t goes to sale k = ((n - 1) * THREADS + t - 1) % SALES, so the sales take turns
-- MODE buy-xff  POST /buy as buy, each request from a new client address behind a trusted proxy (a service
--               with SECKILL_TRUSTED_PROXIES=127.0.0.1): X-Forwarded-For 10.a.b.c, request n of thread t
--               from address (n - 1) * THREADS + t - 1 (2^24 of them, then they repeat); args SALE_ID
--               USER_PREFIX THREADS
-- MODE buy-jwt  POST /buy {"sale_id":"SALE_ID"} with Authorization: Bearer <token>, for a service with
--               SECKILL_AUTH=jwt: args SALE_ID TOKENS_FILE THREADS; the file holds one pre-signed token
--               per line, each a distinct user (wrk cannot sign); thread t sends tokens t, t+THREADS, ...
--               (wrapping around when they run out: then the answers are 409)
-- MODE repeat   POST /buy {"sale_id":"SALE_ID","user_id":"USER_PREFIX-<i>"} cycling over i = 0 .. USERS-1:
--               args SALE_ID USER_PREFIX USERS THREADS; buyers who bought beforehand, so every answer
--               is a 409 already_purchased; every 16th response's body is looked at for an order_id
-- MODE queue-join POST /sales/SALE_ID/queue?user_id=USER_PREFIX-<counter>-<thread> (no body): every
--               request a new buyer joining a queued sale's waiting room
-- MODE queue-poll GET /sales/SALE_ID/queue?user_id=<user>&ticket=<ticket>: args SALE_ID TICKETS_FILE
--               THREADS; the file holds "<user> <ticket>" lines (the driver joined them); thread t
--               cycles over lines t, t+THREADS, ... (the ticket poll a waiting crowd sends)
--
-- Pacing (optional): BENCH_RATE=<total requests/s> and BENCH_THREADS=<wrk -t> in the environment
-- define delay(): each thread hands out send times on a fixed schedule of BENCH_RATE/BENCH_THREADS
-- per second, and a connection waits for its slot (1 ms resolution). That approximates an
-- open-loop arrival rate while enough connections are idle. Latency is still measured by wrk from
-- the moment a request is written, so a stall is not charged to the requests it delayed
-- (no coordinated-omission correction).
--
-- response() counts statuses per thread; done() prints one line
--   BENCH_WRK {"requests":…,"duration_us":…,"errors":{…},"latency_us":{…},"statuses":{"201":…},
--              "bodies":{"sampled":…,"order_id":…}}
-- that xtask reads (wrk's own text summary is printed too).

local threads = {}
local tid = 0
local mode = "healthz"
local sale = ""
local prefix = "u"
local counter = 0
local cached = nil
local tokens = nil
local polls = nil
local nthreads = 1
local users = 0
local spread = false
local sales = 0
local responses = 0
statuses = {} -- global: read by done() through thread:get("statuses")
bodies = { sampled = 0, order_id = 0 } -- global: repeat mode's sampled bodies, and how many had an order_id

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function init(args)
  tid = tonumber(wrk.thread:get("tid")) or 0
  mode = args[1] or "healthz"
  if mode == "buy" then
    sale = assert(args[2], "buy needs SALE_ID")
    prefix = args[3] or "u"
    wrk.method = "POST"
    wrk.path = "/buy"
    wrk.headers["Content-Type"] = "application/json"
  elseif mode == "buy-xff" then
    sale = assert(args[2], "buy-xff needs SALE_ID")
    prefix = assert(args[3], "buy-xff needs USER_PREFIX")
    nthreads = tonumber(args[4]) or 1
    spread = true
    wrk.method = "POST"
    wrk.path = "/buy"
  elseif mode == "buy-sales" then
    sale = assert(args[2], "buy-sales needs SALE_PREFIX")
    sales = assert(tonumber(args[3]), "buy-sales needs SALES")
    prefix = assert(args[4], "buy-sales needs USER_PREFIX")
    nthreads = tonumber(args[5]) or 1
    wrk.method = "POST"
    wrk.path = "/buy"
    wrk.headers["Content-Type"] = "application/json"
  elseif mode == "buy-jwt" then
    sale = assert(args[2], "buy-jwt needs SALE_ID")
    nthreads = tonumber(args[4]) or 1
    tokens = {}
    -- assert() returns all its arguments: bind the path first, or io.lines takes the message as a read format
    local tokens_file = assert(args[3], "buy-jwt needs TOKENS_FILE")
    for line in io.lines(tokens_file) do
      tokens[#tokens + 1] = line
    end
    assert(#tokens > 0, "no tokens in " .. tokens_file)
    wrk.method = "POST"
    wrk.path = "/buy"
  elseif mode == "repeat" then
    sale = assert(args[2], "repeat needs SALE_ID")
    prefix = assert(args[3], "repeat needs USER_PREFIX")
    users = assert(tonumber(args[4]), "repeat needs USERS")
    nthreads = tonumber(args[5]) or 1
    wrk.method = "POST"
    wrk.path = "/buy"
    wrk.headers["Content-Type"] = "application/json"
  elseif mode == "queue-join" then
    sale = assert(args[2], "queue-join needs SALE_ID")
    prefix = args[3] or "j"
    wrk.method = "POST"
  elseif mode == "queue-poll" then
    sale = assert(args[2], "queue-poll needs SALE_ID")
    nthreads = tonumber(args[4]) or 1
    polls = {}
    local tickets_file = assert(args[3], "queue-poll needs TICKETS_FILE")
    for line in io.lines(tickets_file) do
      local user, ticket = line:match("^(%S+) (%S+)$")
      polls[#polls + 1] = string.format("/sales/%s/queue?user_id=%s&ticket=%s", sale, user, ticket)
    end
    assert(#polls > 0, "no tickets in " .. tickets_file)
    wrk.method = "GET"
  elseif mode == "healthz" then
    wrk.method = "GET"
    wrk.path = "/healthz"
    cached = wrk.format()
  elseif mode == "sale" then
    wrk.method = "GET"
    wrk.path = "/sales/" .. assert(args[2], "sale needs SALE_ID")
    cached = wrk.format()
  else
    error("unknown mode " .. tostring(mode))
  end
end

function request()
  if cached then
    return cached
  end
  counter = counter + 1
  if mode == "queue-join" then
    return wrk.format(nil, string.format("/sales/%s/queue?user_id=%s-%d-%d", sale, prefix, counter, tid))
  end
  if polls then
    return wrk.format(nil, polls[((counter - 1) * nthreads + tid - 1) % #polls + 1])
  end
  if tokens then
    local token = tokens[((counter - 1) * nthreads + tid - 1) % #tokens + 1]
    return wrk.format(nil, nil, { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token },
      string.format('{"sale_id":"%s"}', sale))
  end
  if spread then
    local n = ((counter - 1) * nthreads + tid - 1) % 16777216
    local from = string.format("10.%d.%d.%d", math.floor(n / 65536), math.floor(n / 256) % 256, n % 256)
    return wrk.format(nil, nil, { ["Content-Type"] = "application/json", ["X-Forwarded-For"] = from },
      string.format('{"sale_id":"%s","user_id":"%s-%d-%d"}', sale, prefix, counter, tid))
  end
  if users > 0 then
    return wrk.format(nil, nil, nil,
      string.format('{"sale_id":"%s","user_id":"%s-%d"}', sale, prefix, ((counter - 1) * nthreads + tid - 1) % users))
  end
  if sales > 0 then
    return wrk.format(nil, nil, nil, string.format('{"sale_id":"%s-%d","user_id":"%s-%d-%d"}',
      sale, ((counter - 1) * nthreads + tid - 1) % sales, prefix, counter, tid))
  end
  return wrk.format(nil, nil, nil,
    string.format('{"sale_id":"%s","user_id":"%s-%d-%d"}', sale, prefix, counter, tid))
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if users > 0 then
    responses = responses + 1
    if responses % 16 == 0 then
      bodies.sampled = bodies.sampled + 1
      if status == 409 and body:find('"order_id":"%x+%-%x+%-%x+%-%x+%-%x+"') then
        bodies.order_id = bodies.order_id + 1
      end
    end
  end
end

local rate = tonumber(os.getenv("BENCH_RATE") or "") or 0
if rate > 0 then
  local ffi = require("ffi")
  ffi.cdef [[
    typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
    int clock_gettime(int clk_id, bench_timespec *tp);
  ]]
  local ts = ffi.new("bench_timespec")
  local function now_ms()
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
  end
  local per_thread = rate / (tonumber(os.getenv("BENCH_THREADS") or "") or 1)
  local interval = 1000 / per_thread
  local next_slot = nil

  function delay()
    local now = now_ms()
    if next_slot == nil then
      next_slot = now
    end
    local slot = next_slot
    next_slot = next_slot + interval
    local wait = slot - now
    if wait < 0 then
      return 0
    end
    return math.floor(wait)
  end
end

function done(summary, latency, requests)
  local total = {}
  local sampled, with_order_id = 0, 0
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    if type(s) == "table" then
      for k, v in pairs(s) do
        total[k] = (total[k] or 0) + v
      end
    end
    local b = t:get("bodies")
    if type(b) == "table" then
      sampled = sampled + b.sampled
      with_order_id = with_order_id + b.order_id
    end
  end
  local parts = {}
  for k, v in pairs(total) do
    table.insert(parts, string.format('"%d":%d', k, v))
  end
  table.sort(parts)
  local e = summary.errors
  io.write(string.format(
    'BENCH_WRK {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"mean":%.1f,"stdev":%.1f,"max":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d},' ..
    '"statuses":{%s},"bodies":{"sampled":%d,"order_id":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    table.concat(parts, ","), sampled, with_order_id))
end
