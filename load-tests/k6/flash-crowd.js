// Flash crowd against seckill: the buyer's side of a sale, step by step.
//
// Two modes (env MODE), run as two k6 invocations by `cargo xtask load k6`:
//
//   MODE=crowd     scenario `crowd`: ramping-arrival-rate, each iteration a distinct user of a
//                  random one of SALES sales, which open at STARTS_AT_MS (the driver seeds them a
//                  few seconds ahead, so there is a countdown). Users trickle in at START_RPS until
//                  the start, then arrive faster up to PEAK_RPS. Each user
//                    (a) polls GET /sales/{id} (with If-None-Match) every ~POLL_MS until its
//                        state is no longer `upcoming`;
//                    (b) buys (POST /buy) if it is `open` (a user who sees `sold_out` leaves, as a
//                        buyer page disables its button); a share (RETRY_RATIO) sends the purchase
//                        again at once, like a double click, and must get 409 with the same
//                        order id;
//                    (c) after a 201 or 409 polls GET /sales/{id}/order at once and then about
//                        once a second (at most ORDER_POLLS times) until it is `confirmed`.
//                  Meant to run with `--local-ips 127.0.0.2-127.0.0.250`, so the crowd comes from
//                  ~250 client addresses and stays under the per-IP limit (which /buy and the
//                  order route share).
//   MODE=too_fast  scenario `too_fast`: TOO_FAST_RPS purchases per second from ONE address (run
//                  it without --local-ips: every VU is 127.0.0.1), far over SECKILL_RATE_LIMIT,
//                  so most answers are 429 with Retry-After.
//
// k6 hands --local-ips addresses to VUs round-robin for the whole run, so one invocation cannot
// have both a crowd spread over many addresses and a single too-fast address; hence two runs.
//
// AUTH=jwt (for a service with SECKILL_AUTH=jwt): every purchase and order poll carries an HS256
// token naming its user, signed here with JWT_SECRET (the service's SECKILL_JWT_SECRET) by
// k6/crypto's HMAC, and neither the body nor the query names a user_id. AUTH=none (the default):
// the body's / the query's user_id names the buyer.
//
// Every response is checked for its class and its shape; every request and check is tagged with
// its step (`status`, `buy`, `order`), and the thresholds hold per step. Each 201's order is
// printed to the console as `order SALE USER ORDER_ID` (the driver sends the console to a file
// with --console-output and checks every one of those orders in Postgres and through the order
// route afterwards). k6 exits 99 when a threshold fails.

import http from 'k6/http';
import crypto from 'k6/crypto';
import encoding from 'k6/encoding';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';

// ---- settings (all from the environment, see load-tests/README.md) ----------------------------

function envInt(name, fallback) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${raw}`);
  return n;
}

function envFloat(name, fallback) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got ${raw}`);
  return n;
}

// "500ms" | "10s" | "1m" -> seconds
function durationSecs(text) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(String(text).trim());
  if (!m) throw new Error(`bad duration ${text} (use e.g. 500ms, 10s, 1m)`);
  const v = Number(m[1]);
  return m[2] === 'ms' ? v / 1000 : m[2] === 's' ? v : v * 60;
}

const MODE = __ENV.MODE || 'crowd';
if (MODE !== 'crowd' && MODE !== 'too_fast') throw new Error(`MODE must be crowd or too_fast, got ${MODE}`);

const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
const RUN_ID = __ENV.RUN_ID || String(Date.now()); // keeps user ids distinct across runs

// crowd
const SALES = Math.max(1, envInt('SALES', 3));
const SALE_PREFIX = __ENV.SALE_PREFIX || 'flash';
const STOCK = envInt('STOCK', 0); // each sale's stock_initial, checked in the status when > 0
const STARTS_AT_MS = envInt('STARTS_AT_MS', 0); // when the sales open (0: they are open already)
const PEAK_RPS = Math.max(1, envInt('PEAK_RPS', 1500));
const START_RPS = Math.min(PEAK_RPS, envInt('START_RPS', 50));
const RAMP = __ENV.RAMP || '10s';
const HOLD = __ENV.HOLD || '20s';
const RETRY_RATIO = Math.min(1, envFloat('RETRY_RATIO', 0.1));
// Seconds until the sales open, as k6 starts (0: they are open).
const COUNTDOWN_S = Math.max(0, Math.ceil((STARTS_AT_MS - Date.now()) / 1000));
// Enough VUs for the users waiting for the start (each holds one), and 250 more.
const PRE_VUS = Math.max(1, envInt('PRE_VUS', START_RPS * COUNTDOWN_S + 250));
const MAX_VUS = Math.max(PRE_VUS, envInt('MAX_VUS', 2000));
const POLL_MS = Math.max(50, envInt('POLL_MS', 500)); // the status poll's period while upcoming
const WAIT_LIMIT_S = envInt('WAIT_LIMIT_S', 60); // a user stops waiting for the start after this
const ORDER_POLLS = Math.max(1, envInt('ORDER_POLLS', 10)); // order polls per buyer, at most
const ORDER_POLL_MS = Math.max(100, envInt('ORDER_POLL_MS', 1000));
const P99_MS = envInt('P99_MS', 250);
const STATUS_P95_MS = envInt('STATUS_P95_MS', 100);
const BUY_P95_MS = envInt('BUY_P95_MS', 250);
const ORDER_P95_MS = envInt('ORDER_P95_MS', 250);
const CONFIRM_P95_MS = envInt('CONFIRM_P95_MS', 3000);

// too fast
const TOO_FAST_SALE = __ENV.TOO_FAST_SALE || 'limiter';
const TOO_FAST_RPS = Math.max(1, envInt('TOO_FAST_RPS', 100));
const TOO_FAST_DURATION = __ENV.TOO_FAST_DURATION || '10s';
// The server's SECKILL_RATE_LIMIT ("REQUESTS/WINDOW"): bounds how many requests may get through.
const RATE_LIMIT = __ENV.SECKILL_RATE_LIMIT || '20/1s';

function parseRateLimit(text) {
  const m = /^\s*(\d+)\s*\/\s*(\S+)\s*$/.exec(text);
  if (!m) throw new Error(`bad SECKILL_RATE_LIMIT ${text}`);
  return { limit: Number(m[1]), windowSecs: durationSecs(m[2]) };
}

const REQUEST_TIMEOUT = __ENV.REQUEST_TIMEOUT || '5s';

// ---- metrics -----------------------------------------------------------------------------------

// Answers to POST /buy, by class.
const status201 = new Counter('status_201_created');
const status409 = new Counter('status_409_already_purchased');
const status410 = new Counter('status_410_sold_out');
const status429 = new Counter('status_429_rate_limited');
// Any step: server errors, and anything else unexpected (e.g. 403/404/0 = timeout).
const status5xx = new Counter('status_5xx');
const statusOther = new Counter('status_other');
const rateLimited = new Rate('rate_limited'); // share of /buy answers that were 429
const retryAfterBuy = new Rate('retry_after_201_is_409'); // second attempt of a buyer: 409, same order
// Step (a): the countdown.
const salePolls = new Counter('sale_polls');
const salePollsUpcoming = new Counter('sale_polls_upcoming');
const salePollsNotModified = new Counter('sale_polls_304');
const waitForOpen = new Trend('wait_for_open', true); // first poll -> the poll that saw the start
const waitTimedOut = new Counter('wait_timed_out');
const sawSoldOut = new Counter('saw_sold_out'); // users who left without buying
// Step (c): the order.
const orderPolls = new Counter('order_polls');
const orderRateLimited = new Rate('order_rate_limited');
const ordersConfirmed = new Counter('orders_confirmed');
const ordersUnconfirmed = new Counter('orders_unconfirmed'); // not confirmed within ORDER_POLLS
const timeToConfirmed = new Trend('time_to_confirmed', true); // the 201 -> the poll saying confirmed

// ---- options -----------------------------------------------------------------------------------

function crowdOptions() {
  // Before the start users trickle in at START_RPS (each one waits, holding a VU), then the crowd
  // ramps up. The options come from the first evaluation of this file, at k6's start.
  const countdown = Math.max(1, COUNTDOWN_S);
  return {
    scenarios: {
      crowd: {
        executor: 'ramping-arrival-rate',
        startRate: START_RPS,
        timeUnit: '1s',
        preAllocatedVUs: PRE_VUS,
        maxVUs: MAX_VUS,
        stages: [
          { target: START_RPS, duration: `${countdown}s` },
          { target: PEAK_RPS, duration: RAMP },
          { target: PEAK_RPS, duration: HOLD },
        ],
        // Long enough for the last buyers to see their order confirmed.
        gracefulStop: `${Math.ceil((ORDER_POLLS * ORDER_POLL_MS) / 1000) + 5}s`,
      },
    },
    thresholds: {
      status_5xx: ['count==0'],
      status_other: ['count==0'],
      http_req_failed: ['rate<0.001'],
      http_req_duration: [`p(99)<${P99_MS}`],
      checks: ['rate>0.99'],
      // Per step: its checks and its latency.
      'checks{step:status}': ['rate>0.99'],
      'checks{step:buy}': ['rate>0.99'],
      'checks{step:order}': ['rate>0.99'],
      'http_req_duration{step:status}': [`p(95)<${STATUS_P95_MS}`],
      'http_req_duration{step:buy}': [`p(95)<${BUY_P95_MS}`],
      'http_req_duration{step:order}': [`p(95)<${ORDER_P95_MS}`],
      // (a) Nobody waited in vain (and, for sales seeded ahead, there was a countdown).
      wait_timed_out: ['count==0'],
      ...(STARTS_AT_MS > 0 ? { sale_polls_upcoming: ['count>0'] } : {}),
      // (b) The crowd comes from ~250 addresses at a few requests per second each: the limiter
      // must hardly ever fire. Many 429s here mean the addresses were not spread (see README).
      rate_limited: ['rate<0.01'],
      // Every user who bought and asked again was told 409, with the same order id.
      retry_after_201_is_409: ['rate==1'],
      // (c) Every buyer saw its order confirmed, soon.
      order_rate_limited: ['rate<0.01'],
      orders_unconfirmed: ['count==0'],
      time_to_confirmed: [`p(95)<${CONFIRM_P95_MS}`],
    },
  };
}

function tooFastOptions() {
  const { limit, windowSecs } = parseRateLimit(RATE_LIMIT);
  const secs = durationSecs(TOO_FAST_DURATION);
  // A sliding window admits at most `limit` requests in any window: over `secs` seconds, at most
  // limit * (windows + 1) (the +1 covers the window that straddles the end); sliding-log (the
  // default) admits exactly that. gcra and token-bucket with the default burst (= limit) admit at
  // most burst + limit * windows: the same.
  const maxAdmitted = Math.floor(limit * (Math.ceil(secs / windowSecs) + 1));
  const sent = TOO_FAST_RPS * secs;
  const thresholds = {
    status_5xx: ['count==0'],
    status_other: ['count==0'],
    http_req_failed: ['rate<0.001'],
    http_req_duration: [`p(99)<${P99_MS}`],
    checks: ['rate>0.99'],
    status_429_rate_limited: ['count>0'],
  };
  // Only meaningful when the client really is too fast.
  if (sent > maxAdmitted) {
    thresholds.status_201_created = [`count<=${maxAdmitted}`];
  }
  return {
    scenarios: {
      too_fast: {
        executor: 'constant-arrival-rate',
        rate: TOO_FAST_RPS,
        timeUnit: '1s',
        duration: TOO_FAST_DURATION,
        preAllocatedVUs: 20,
        maxVUs: 50,
        gracefulStop: '5s',
      },
    },
    thresholds,
  };
}

export const options = Object.assign(MODE === 'crowd' ? crowdOptions() : tooFastOptions(), {
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
  userAgent: 'seckill-load-tests/k6',
});

// Not-failed in http_req_failed: the answers a flash sale is expected to give.
http.setResponseCallback(http.expectedStatuses(200, 201, 304, 409, 410, 429));

// ---- the checks --------------------------------------------------------------------------------

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const STATES = ['upcoming', 'open', 'sold_out', 'ended'];

function jsonBody(res) {
  try {
    return res.json();
  } catch (_) {
    return null;
  }
}

function isJson(res) {
  return /^application\/json/i.test(res.headers['Content-Type'] || '');
}

// {"error": code, "message": "..."} and nothing else
function isError(body, code) {
  return (
    body !== null &&
    typeof body === 'object' &&
    body.error === code &&
    typeof body.message === 'string' &&
    body.message.length > 0 &&
    Object.keys(body).length === 2
  );
}

// A bought order as the 409 and the order route describe it: its id, queued or confirmed, when.
function isOrder(body) {
  return (
    body !== null &&
    UUID.test(String(body.order_id)) &&
    (body.status === 'queued' || body.status === 'confirmed') &&
    !Number.isNaN(Date.parse(body.created_at))
  );
}

// The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers), as seckill sends them.
const RATELIMIT_POLICY = /^"buy";q=\d+;w=\d+$/;
const RATELIMIT_STATE = /^"buy";r=\d+;t=\d+$/;

const STEP_BUY = { step: 'buy' };
const STEP_STATUS = { step: 'status' };
const STEP_ORDER = { step: 'order' };

// Anything but the expected statuses of a step: counted, failed, logged.
function unexpected(res, step, what) {
  if (res.status >= 500) status5xx.add(1);
  else statusOther.add(1);
  check(res, { [`${step.step}: an expected status`]: () => false }, step);
  console.warn(`unexpected ${res.status} for ${what}: ${String(res.body).slice(0, 200)}`);
}

function check429(res, body, step) {
  check(
    res,
    {
      '429 is {"error":"rate_limited","message"}': (r) => isJson(r) && isError(body, 'rate_limited'),
      '429 has Retry-After >= 1 (seconds)': (r) => /^[1-9]\d*$/.test(r.headers['Retry-After'] || ''),
      '429 has RateLimit with r=0': (r) => /;r=0;/.test(r.headers['Ratelimit'] || ''),
    },
    step,
  );
}

// One answer to POST /buy; returns its JSON body.
function record(res, sale, user) {
  const body = jsonBody(res);
  rateLimited.add(res.status === 429);
  switch (res.status) {
    case 201:
      status201.add(1);
      check(
        res,
        {
          '201 is JSON': (r) => isJson(r),
          '201 has order_id (UUID), sale_id, user_id': () =>
            body !== null && UUID.test(String(body.order_id)) && body.sale_id === sale && body.user_id === user,
          '201 has RateLimit-Policy and RateLimit': (r) =>
            RATELIMIT_POLICY.test(r.headers['Ratelimit-Policy'] || '') && RATELIMIT_STATE.test(r.headers['Ratelimit'] || ''),
        },
        STEP_BUY,
      );
      if (body !== null) console.log(`order ${sale} ${user} ${body.order_id}`);
      break;
    case 409:
      status409.add(1);
      check(
        res,
        {
          '409 is already_purchased with the order (order_id, status, created_at)': (r) =>
            isJson(r) && body !== null && body.error === 'already_purchased' && typeof body.message === 'string' &&
            isOrder(body),
        },
        STEP_BUY,
      );
      break;
    case 410:
      status410.add(1);
      check(res, { '410 is {"error":"sold_out","message"}': (r) => isJson(r) && isError(body, 'sold_out') }, STEP_BUY);
      break;
    case 429:
      status429.add(1);
      check429(res, body, STEP_BUY);
      break;
    default:
      unexpected(res, STEP_BUY, `POST /buy ${sale}/${user}`);
  }
  return body;
}

const AUTH = __ENV.AUTH || 'none';
const JWT_SECRET = __ENV.JWT_SECRET || '';
if (AUTH !== 'none' && AUTH !== 'jwt') throw new Error(`AUTH must be none or jwt, got ${AUTH}`);
if (AUTH === 'jwt' && JWT_SECRET.length < 32) throw new Error('AUTH=jwt needs JWT_SECRET (at least 32 bytes)');
const JWT_HEADER = encoding.b64encode(JSON.stringify({ alg: 'HS256', typ: 'JWT' }), 'rawurl');

// An HS256 JWT naming `user` (sub), valid for an hour.
function token(user) {
  const now = Math.floor(Date.now() / 1000);
  const claims = encoding.b64encode(JSON.stringify({ sub: user, iat: now, exp: now + 3600 }), 'rawurl');
  const signed = `${JWT_HEADER}.${claims}`;
  return `${signed}.${crypto.hmac('sha256', JWT_SECRET, signed, 'base64rawurl')}`;
}

function buy(sale, user) {
  const headers = { 'Content-Type': 'application/json' };
  let body = { sale_id: sale, user_id: user };
  if (AUTH === 'jwt') {
    headers.Authorization = `Bearer ${token(user)}`;
    body = { sale_id: sale };
  }
  return http.post(`${BASE_URL}/buy`, JSON.stringify(body), {
    headers,
    timeout: REQUEST_TIMEOUT,
    tags: { name: 'POST /buy', step: 'buy' },
  });
}

// ---- (a) the countdown: GET /sales/{id} ---------------------------------------------------------

// One answer to GET /sales/{id}: the sale's status (the previous one on 304), or null.
function recordStatus(res, sale, previous, etag) {
  salePolls.add(1);
  if (res.status === 304) {
    salePollsNotModified.add(1);
    check(
      res,
      {
        'status 304 answers our ETag, with no body': (r) => previous !== null && r.headers['Etag'] === etag && !r.body,
      },
      STEP_STATUS,
    );
    if (previous !== null && previous.state === 'upcoming') salePollsUpcoming.add(1);
    return previous;
  }
  if (res.status !== 200) {
    unexpected(res, STEP_STATUS, `GET /sales/${sale}`);
    return null;
  }
  const body = jsonBody(res);
  check(
    res,
    {
      'status is the sale, its state and stock': (r) =>
        isJson(r) &&
        body !== null &&
        body.sale_id === sale &&
        STATES.includes(body.state) &&
        (STOCK === 0 || body.stock_initial === STOCK) &&
        body.stock_left >= 0 &&
        body.stock_left <= body.stock_initial,
      // upcoming exactly while server_time < starts_at, on the server's clock (the page's countdown)
      'status state agrees with server_time and starts_at': () =>
        body !== null &&
        (body.state === 'upcoming') === (body.starts_at !== null && Date.parse(body.server_time) < Date.parse(body.starts_at)),
      'status has Cache-Control public, max-age=1 and a weak ETag': (r) =>
        r.headers['Cache-Control'] === 'public, max-age=1' && /^W\/".+"$/.test(r.headers['Etag'] || ''),
    },
    STEP_STATUS,
  );
  if (body !== null && body.state === 'upcoming') salePollsUpcoming.add(1);
  return body;
}

// Polls the sale's status (If-None-Match with the last ETag) until it is no longer upcoming; its
// state then, or null when WAIT_LIMIT_S passed first.
function waitForStart(sale) {
  const started = Date.now();
  let status = null;
  let etag = null;
  for (;;) {
    const res = http.get(`${BASE_URL}/sales/${sale}`, {
      headers: etag ? { 'If-None-Match': etag } : {},
      timeout: REQUEST_TIMEOUT,
      tags: { name: 'GET /sales/{id}', step: 'status' },
    });
    const seen = recordStatus(res, sale, status, etag);
    if (seen !== null) {
      status = seen;
      etag = res.headers['Etag'] || null;
    }
    if (status !== null && status.state !== 'upcoming') {
      waitForOpen.add(Date.now() - started);
      return status.state;
    }
    if (Date.now() - started > WAIT_LIMIT_S * 1000) {
      waitTimedOut.add(1);
      console.warn(`${sale}: still not started after ${WAIT_LIMIT_S} s`);
      return null;
    }
    sleep((POLL_MS / 1000) * (0.8 + 0.4 * Math.random()));
  }
}

// ---- (c) the order: GET /sales/{id}/order ---------------------------------------------------------

function getOrder(sale, user) {
  const headers = {};
  let query = `?user_id=${encodeURIComponent(user)}`;
  if (AUTH === 'jwt') {
    headers.Authorization = `Bearer ${token(user)}`;
    query = '';
  }
  return http.get(`${BASE_URL}/sales/${sale}/order${query}`, {
    headers,
    timeout: REQUEST_TIMEOUT,
    tags: { name: 'GET /sales/{id}/order', step: 'order' },
  });
}

// Polls the buyer's order at once, then about once a second, until it is confirmed: always with
// the order id the purchase answered, never `none`. `boughtAt` is when the purchase answered.
function awaitConfirmed(sale, user, orderId, boughtAt) {
  for (let poll = 0; poll < ORDER_POLLS; poll++) {
    if (poll > 0) sleep((ORDER_POLL_MS / 1000) * (0.9 + 0.2 * Math.random()));
    const res = getOrder(sale, user);
    orderPolls.add(1);
    orderRateLimited.add(res.status === 429);
    const body = jsonBody(res);
    if (res.status === 429) {
      check429(res, body, STEP_ORDER);
      sleep(Number(res.headers['Retry-After']) || 1);
      continue;
    }
    if (res.status !== 200) {
      unexpected(res, STEP_ORDER, `GET /sales/${sale}/order ${user}`);
      continue;
    }
    check(
      res,
      {
        "order is the buyer's (queued or confirmed, the purchase's order_id)": (r) =>
          isJson(r) && isOrder(body) && body.order_id === orderId,
        'order has Cache-Control no-store': (r) => r.headers['Cache-Control'] === 'no-store',
      },
      STEP_ORDER,
    );
    if (body !== null && body.status === 'confirmed') {
      ordersConfirmed.add(1);
      timeToConfirmed.add(Date.now() - boughtAt);
      return;
    }
  }
  ordersUnconfirmed.add(1);
  console.warn(`${sale}/${user}: order ${orderId} not confirmed after ${ORDER_POLLS} polls`);
}

// ---- the scenarios -----------------------------------------------------------------------------

function crowdUser(sale, user) {
  const state = waitForStart(sale);
  if (state !== 'open') {
    if (state === 'sold_out') sawSoldOut.add(1);
    return;
  }
  const first = buy(sale, user);
  const boughtAt = Date.now();
  const body = record(first, sale, user);
  let orderId = (first.status === 201 || first.status === 409) && body !== null ? body.order_id : null;
  if (Math.random() < RETRY_RATIO) {
    const again = buy(sale, user);
    const repeat = record(again, sale, user);
    if (first.status === 201) {
      const same = again.status === 409 && repeat !== null && repeat.order_id === orderId;
      retryAfterBuy.add(same);
      const ok = check(again, { 'a buyer asking again gets 409 with the same order_id': () => same }, STEP_BUY);
      if (!ok) console.warn(`buyer ${sale}/${user} asked again and got ${again.status}: ${String(again.body).slice(0, 200)}`);
    } else if (orderId === null && (again.status === 201 || again.status === 409) && repeat !== null) {
      orderId = repeat.order_id;
    }
  }
  if (orderId) awaitConfirmed(sale, user, orderId, boughtAt);
}

export default function () {
  const n = exec.scenario.iterationInTest; // unique per iteration across all VUs of this scenario
  if (MODE === 'too_fast') {
    const user = `tf-${RUN_ID}-${n}`;
    record(buy(TOO_FAST_SALE, user), TOO_FAST_SALE, user);
    return;
  }
  crowdUser(`${SALE_PREFIX}-${1 + Math.floor(Math.random() * SALES)}`, `u-${RUN_ID}-${n}`);
}

// ---- end-of-test summary -----------------------------------------------------------------------

function count(data, name) {
  const m = data.metrics[name];
  return m ? m.values.count : 0;
}

function ms(v) {
  if (v === undefined || v === null) return '-';
  return v >= 1000 ? `${(v / 1000).toFixed(2)}s` : `${v.toFixed(2)}ms`;
}

function pct(v) {
  return `${(100 * (v || 0)).toFixed(2)}%`;
}

// "p50 … p95 … max …" of a Trend (or a threshold's sub-metric).
function trend(data, name) {
  const m = data.metrics[name];
  if (!m) return '-';
  const v = m.values;
  return `p50 ${ms(v.med)}  p95 ${ms(v['p(95)'])}  max ${ms(v.max)}`;
}

function thresholdLines(data) {
  const lines = [];
  for (const [name, metric] of Object.entries(data.metrics)) {
    for (const [expr, result] of Object.entries(metric.thresholds || {})) {
      lines.push(`    ${result.ok ? 'ok  ' : 'FAIL'} ${name} ${expr}`);
    }
  }
  return lines.sort();
}

function stepLines(data) {
  if (MODE !== 'crowd') return [];
  return [
    `  (a) status   ${count(data, 'sale_polls')} polls (${count(data, 'sale_polls_upcoming')} upcoming,` +
      ` ${count(data, 'sale_polls_304')} × 304)  ${trend(data, 'http_req_duration{step:status}')}`,
    `               waited for the start ${trend(data, 'wait_for_open')};` +
      ` left at sold_out ${count(data, 'saw_sold_out')}, timed out ${count(data, 'wait_timed_out')}`,
    `  (b) buy      ${trend(data, 'http_req_duration{step:buy}')}`,
    `  (c) order    ${count(data, 'order_polls')} polls  ${trend(data, 'http_req_duration{step:order}')};` +
      ` confirmed ${count(data, 'orders_confirmed')}, not confirmed ${count(data, 'orders_unconfirmed')};` +
      ` 201 -> confirmed ${trend(data, 'time_to_confirmed')}`,
  ];
}

function textSummary(data) {
  const m = data.metrics;
  const dur = (m.http_req_duration || { values: {} }).values;
  const reqs = m.http_reqs ? m.http_reqs.values : { count: 0, rate: 0 };
  const checks = m.checks ? m.checks.values : { passes: 0, fails: 0, rate: 0 };
  const secs = data.state.testRunDurationMs / 1000;
  const failedThresholds = thresholdLines(data).filter((l) => l.includes('FAIL')).length;
  const lines = [
    '',
    `seckill k6 ${MODE} against ${BASE_URL} (run ${RUN_ID})`,
    `  requests     ${reqs.count} in ${secs.toFixed(1)}s = ${reqs.rate.toFixed(0)} req/s` +
      `  (iterations ${count(data, 'iterations')}, dropped ${count(data, 'dropped_iterations')},` +
      ` max VUs ${m.vus_max ? m.vus_max.values.max : '-'})`,
    `  latency      avg ${ms(dur.avg)}  p50 ${ms(dur.med)}  p90 ${ms(dur['p(90)'])}` +
      `  p95 ${ms(dur['p(95)'])}  p99 ${ms(dur['p(99)'])}  max ${ms(dur.max)}`,
    `  /buy         201 ${count(data, 'status_201_created')}  409 ${count(data, 'status_409_already_purchased')}` +
      `  410 ${count(data, 'status_410_sold_out')}  429 ${count(data, 'status_429_rate_limited')}` +
      `;  any step: 5xx ${count(data, 'status_5xx')}  other ${count(data, 'status_other')}`,
    ...stepLines(data),
    `  checks       ${pct(checks.rate)} (${checks.passes} passed, ${checks.fails} failed)`,
    `  thresholds   ${failedThresholds === 0 ? 'all passed' : `${failedThresholds} FAILED`}`,
    ...thresholdLines(data),
  ];
  if (data.root_group && data.root_group.checks) {
    lines.push('  checks by name');
    for (const c of data.root_group.checks) {
      lines.push(`    ${c.fails === 0 ? 'ok  ' : 'FAIL'} ${c.name}: ${c.passes} passed, ${c.fails} failed`);
    }
  }
  return lines.join('\n') + '\n\n';
}

export function handleSummary(data) {
  const out = { stdout: textSummary(data) };
  const file = __ENV.SUMMARY_JSON || `load-tests/results/k6-${MODE === 'crowd' ? '' : 'too-fast-'}summary.json`;
  if (file !== '-') out[file] = JSON.stringify(data, null, 2);
  return out;
}
