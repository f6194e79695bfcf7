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
//                    (c) with a payment window (PAYMENT_WINDOW_MS > 0: the 201 says `reserved`,
//                        with `pay_by`), a buyer then (at once, or up to THINK_MS later) pays
//                        (share PAY_RATIO: a signed
//                        `order.paid` event to POST /payments/events), cancels (share
//                        CANCEL_RATIO: DELETE /sales/{id}/order) or does nothing (the reservation
//                        expires at pay_by and the unit goes back to the stock);
//                    (d) after a 201 or 409 polls GET /sales/{id}/order at once and then about
//                        once a second (at most ORDER_POLLS times) until it is stored: `confirmed`
//                        without a window; with one, not `queued`, and then it must stand as the
//                        buyer left it (`paid`, `cancelled`, else `reserved` or `expired`).
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
// its step (`status`, `buy`, `pay`, `cancel`, `order`), and the thresholds hold per step. Each
// 201's order is printed to the console as `order SALE USER ORDER_ID`, each payment the service
// accepted as `paid SALE ORDER_ID` and each cancel as `cancelled SALE ORDER_ID` (the driver sends
// the console to a file with --console-output and checks every one of those orders in Postgres
// and through the order route afterwards). k6 exits 99 when a threshold fails.

import http from 'k6/http';
import crypto from 'k6/crypto';
import encoding from 'k6/encoding';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';
import { envInt, envFloat, BASE_URL } from './lib/env.js';

// ---- settings (all from the environment, see load-tests/README.md) ----------------------------

// "500ms" | "10s" | "1m" -> seconds
function durationSecs(text) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(String(text).trim());
  if (!m) throw new Error(`bad duration ${text} (use e.g. 500ms, 10s, 1m)`);
  const v = Number(m[1]);
  return m[2] === 'ms' ? v / 1000 : m[2] === 's' ? v : v * 60;
}

const MODE = __ENV.MODE || 'crowd';
if (MODE !== 'crowd' && MODE !== 'too_fast') throw new Error(`MODE must be crowd or too_fast, got ${MODE}`);

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
// Latency thresholds catch a stall, not slowness: the defaults hold on a 2-core host with a cargo
// build running (see load-tests/README.md). Every one times LATENCY_SCALE (the quick run: 4).
const LATENCY_SCALE = Math.max(0.01, envFloat('LATENCY_SCALE', 1));
const latency = (name, fallback) => Math.round(envInt(name, fallback) * LATENCY_SCALE);
const P99_MS = latency('P99_MS', 2000);
const STATUS_P95_MS = latency('STATUS_P95_MS', 1500);
const BUY_P95_MS = latency('BUY_P95_MS', 1500);
const ORDER_P95_MS = latency('ORDER_P95_MS', 1500);
const CONFIRM_P95_MS = latency('CONFIRM_P95_MS', 5000);
// Reservations: the flash sales' payment window (0: none, orders are final at once), and what the
// buyers do with a reservation. PAYMENT_SECRET is the service's SECKILL_PAYMENT_SECRET.
const PAYMENT_WINDOW_MS = envInt('PAYMENT_WINDOW_MS', 0);
const WINDOW = PAYMENT_WINDOW_MS > 0;
const PAY_RATIO = Math.min(1, envFloat('PAY_RATIO', 0.5));
const CANCEL_RATIO = Math.min(1 - PAY_RATIO, envFloat('CANCEL_RATIO', 0.2));
const PAYMENT_SECRET = __ENV.PAYMENT_SECRET || '';
if (MODE === 'crowd' && WINDOW && PAY_RATIO > 0 && PAYMENT_SECRET.length < 32) {
  throw new Error('PAY_RATIO > 0 with a payment window needs PAYMENT_SECRET (at least 32 bytes)');
}
// A buyer pays or cancels a random 0..THINK_MS ms after its 201 (0: at once, often before the
// worker stored the order: the service then stores it from the queue first).
const THINK_MS = envInt('THINK_MS', 0);
if (WINDOW && THINK_MS >= PAYMENT_WINDOW_MS) throw new Error('THINK_MS must be shorter than the payment window');
const PAY_P95_MS = latency('PAY_P95_MS', 1500);
const CANCEL_P95_MS = latency('CANCEL_P95_MS', 1500);

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

// A request is given up (status 0, a failure) no sooner than the p99 threshold allows: one the
// thresholds tolerate must not fail as a timeout (the quick run's scale makes that 8 s).
const REQUEST_TIMEOUT = __ENV.REQUEST_TIMEOUT || `${Math.max(5000, P99_MS)}ms`;

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
const timeToConfirmed = new Trend('time_to_confirmed', true); // the 201 -> the poll saying confirmed (stored)
// With a payment window: what the order polls found once the order was stored.
const ordersReserved = new Counter('orders_seen_reserved');
const ordersPaid = new Counter('orders_seen_paid');
const ordersCancelled = new Counter('orders_seen_cancelled');
const ordersExpired = new Counter('orders_seen_expired');
// Step (c): what the buyers did with their reservations.
const reservations = new Counter('reservations'); // 201s that said `reserved`
const payments = new Counter('payment_events'); // events sent
const paymentsPaid = new Counter('payments_paid'); // answered 200 paid, not late
const paymentsLate = new Counter('payments_late'); // answered 200 with late_payment: true
const cancels = new Counter('cancel_requests'); // DELETE /sales/{id}/order sent (429s retried included)
const cancelsDone = new Counter('cancels_done'); // answered 200 cancelled
const cancelsRefused = new Counter('cancels_refused'); // answered 409 not_reserved
const cancelRateLimited = new Counter('cancel_rate_limited'); // answered 429 (waited out, then again)
const leftToExpire = new Counter('left_to_expire'); // reservations the buyer did nothing with

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
      // (c) With a payment window: the payments and the cancels, their checks and latency.
      ...(WINDOW
        ? {
            'checks{step:pay}': ['rate>0.99'],
            'checks{step:cancel}': ['rate>0.99'],
            'http_req_duration{step:pay}': [`p(95)<${PAY_P95_MS}`],
            'http_req_duration{step:cancel}': [`p(95)<${CANCEL_P95_MS}`],
          }
        : {}),
      // (a) Nobody waited in vain (and, for sales seeded ahead, there was a countdown).
      wait_timed_out: ['count==0'],
      ...(STARTS_AT_MS > 0 ? { sale_polls_upcoming: ['count>0'] } : {}),
      // (b) The crowd comes from ~250 addresses at a few requests per second each: the limiter
      // must hardly ever fire. Many 429s here mean the addresses were not spread (see README).
      rate_limited: ['rate<0.01'],
      // Every user who bought and asked again was told 409, with the same order id.
      retry_after_201_is_409: ['rate==1'],
      // (d) Every buyer saw its order confirmed (with a payment window: stored), soon.
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

// Where an order of a sale with a payment window stands (the order route, and the 409).
const WINDOW_STATES = ['reserved', 'paid', 'cancelled', 'expired'];

// A bought order as the 409 describes it: its id, when, and its status as the order route reads
// it (queued or confirmed without a payment window; with one, a reservation's state).
function isOrder(body) {
  return (
    body !== null &&
    UUID.test(String(body.order_id)) &&
    (WINDOW ? WINDOW_STATES : ['queued', 'confirmed']).includes(body.status) &&
    !Number.isNaN(Date.parse(body.created_at))
  );
}

// A bought order as the order route describes it: its id, when, and `queued`; then `confirmed`
// without a payment window, or with one a reservation's state and its `pay_by`.
function isOrderView(body) {
  if (body === null || !UUID.test(String(body.order_id)) || Number.isNaN(Date.parse(body.created_at))) return false;
  if (body.status === 'queued') return true;
  if (!WINDOW) return body.status === 'confirmed';
  return WINDOW_STATES.includes(body.status) && !Number.isNaN(Date.parse(body.pay_by));
}

// The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers), as seckill sends them.
const RATELIMIT_POLICY = /^"buy";q=\d+;w=\d+$/;
const RATELIMIT_STATE = /^"buy";r=\d+;t=\d+$/;

const STEP_BUY = { step: 'buy' };
const STEP_STATUS = { step: 'status' };
const STEP_ORDER = { step: 'order' };
const STEP_PAY = { step: 'pay' };
const STEP_CANCEL = { step: 'cancel' };

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

// A 201's body names a reservation due one payment window after `sentAt` (when the purchase was
// sent), give or take a second.
function isReservation(body, sentAt) {
  const payBy = Date.parse(body.pay_by);
  return (
    body.status === 'reserved' &&
    payBy >= sentAt + PAYMENT_WINDOW_MS - 1000 &&
    payBy <= Date.now() + PAYMENT_WINDOW_MS + 1000
  );
}

// One answer to POST /buy, sent at `sentAt` (ms); returns its JSON body.
function record(res, sale, user, sentAt) {
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
          // With a window: `reserved`, pay_by = the purchase's time + the window (one clock here);
          // without one (and on the too-fast run's sale, which has none): neither field.
          '201 is reserved with pay_by = now + the window (neither without a window)': () =>
            body !== null &&
            (WINDOW && MODE === 'crowd'
              ? isReservation(body, sentAt)
              : body.status === undefined && body.pay_by === undefined),
        },
        STEP_BUY,
      );
      if (body !== null) console.log(`order ${sale} ${user} ${body.order_id}`);
      if (body !== null && body.status === 'reserved') reservations.add(1);
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

// GET or DELETE /sales/{id}/order as the buyer: `?user_id=` under AUTH=none, its token under jwt.
function ownOrder(method, sale, user, tags) {
  const headers = {};
  let query = `?user_id=${encodeURIComponent(user)}`;
  if (AUTH === 'jwt') {
    headers.Authorization = `Bearer ${token(user)}`;
    query = '';
  }
  return http.request(method, `${BASE_URL}/sales/${sale}/order${query}`, null, {
    headers,
    timeout: REQUEST_TIMEOUT,
    tags,
  });
}

function getOrder(sale, user) {
  return ownOrder('GET', sale, user, { name: 'GET /sales/{id}/order', step: 'order' });
}

// What the order route must say once the order is stored, after the buyer's `decision`.
function expectedStates(decision) {
  if (!WINDOW) return ['confirmed'];
  if (decision === 'pay') return ['paid'];
  if (decision === 'cancel') return ['cancelled'];
  if (decision === 'expire') return ['reserved', 'expired'];
  return WINDOW_STATES; // no decision (its 201 was not seen), or its payment or cancel failed
}

// Polls the buyer's order at once, then about once a second, until it is stored (`confirmed`
// without a payment window; with one, anything but `queued`, which the route says from the 201
// on, and after the buyer's payment or cancel as it left it): always with the order id the
// purchase answered, never `none`, and stored as the buyer's decision left it. `boughtAt` is when
// the purchase answered.
function awaitConfirmed(sale, user, orderId, boughtAt, decision) {
  const expected = expectedStates(decision);
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
    const stored = isOrderView(body) && body.order_id === orderId && body.status !== 'queued';
    check(
      res,
      {
        "order is the buyer's (queued, then confirmed or a reservation's state; the purchase's order_id)": (r) =>
          isJson(r) && isOrderView(body) && body.order_id === orderId,
        'order has Cache-Control no-store': (r) => r.headers['Cache-Control'] === 'no-store',
      },
      STEP_ORDER,
    );
    if (stored) {
      const ok = check(
        res,
        { 'order stands as the buyer left it (paid, cancelled, else reserved or expired)': () => expected.includes(body.status) },
        STEP_ORDER,
      );
      if (!ok) console.warn(`${sale}/${user}: order ${orderId} is ${body.status}, expected ${expected.join(' or ')}`);
      if (body.status === 'reserved') ordersReserved.add(1);
      else if (body.status === 'paid') ordersPaid.add(1);
      else if (body.status === 'cancelled') ordersCancelled.add(1);
      else if (body.status === 'expired') ordersExpired.add(1);
      ordersConfirmed.add(1);
      timeToConfirmed.add(Date.now() - boughtAt);
      return;
    }
  }
  ordersUnconfirmed.add(1);
  console.warn(`${sale}/${user}: order ${orderId} not ${WINDOW ? 'stored' : 'confirmed'} after ${ORDER_POLLS} polls`);
}

// ---- (c) the reservation: pay, cancel or let it expire -------------------------------------------

// The shop's payment system: a signed `order.paid` event for the order (HMAC-SHA256 of
// "<t>.<raw body>" keyed by PAYMENT_SECRET, as the service's SECKILL_PAYMENT_SECRET). A payment the
// service took in time is printed as `paid SALE ORDER_ID`. A payment still unanswered at `payBy` (a
// loaded host) may be either: paid, or late with the order expired.
function pay(sale, user, orderId, payBy) {
  const body = JSON.stringify({ id: `pay-${user}`, type: 'order.paid', sale_id: sale, order_id: orderId });
  const t = Math.floor(Date.now() / 1000);
  const signature = `t=${t},v1=${crypto.hmac('sha256', PAYMENT_SECRET, `${t}.${body}`, 'hex')}`;
  payments.add(1);
  const res = http.post(`${BASE_URL}/payments/events`, body, {
    headers: { 'Content-Type': 'application/json', 'Seckill-Signature': signature },
    timeout: REQUEST_TIMEOUT,
    tags: { name: 'POST /payments/events', step: 'pay' },
  });
  if (res.status !== 200) {
    unexpected(res, STEP_PAY, `POST /payments/events ${sale}/${user} ${orderId}`);
    return false;
  }
  const answer = jsonBody(res);
  const answeredAt = Date.now();
  const late = answer !== null && answer.late_payment === true;
  if (late) paymentsLate.add(1);
  const ok = check(
    res,
    {
      'pay 200 is {"order_id", "status", "late_payment"} for the order': (r) =>
        isJson(r) &&
        answer !== null &&
        answer.order_id === orderId &&
        ['paid', 'expired', 'cancelled'].includes(answer.status) &&
        typeof answer.late_payment === 'boolean' &&
        Object.keys(answer).length === 3,
      'pay before the deadline is paid, not late': () =>
        answer !== null &&
        ((answer.status === 'paid' && !late) || (answeredAt >= payBy && answer.status === 'expired' && late)),
    },
    STEP_PAY,
  );
  if (answer !== null && answer.status === 'paid' && !late) {
    paymentsPaid.add(1);
    console.log(`paid ${sale} ${orderId}`);
    return true;
  }
  if (!ok) console.warn(`payment of ${sale}/${user} ${orderId} answered ${String(res.body).slice(0, 200)}`);
  return false;
}

// The buyer gives its reservation back (a 429 is waited out, then it asks again: at most 3 times).
// A cancel the service took is printed as `cancelled SALE ORDER_ID`.
function cancel(sale, user, orderId) {
  for (let attempt = 0; attempt < 3; attempt++) {
    cancels.add(1);
    const res = ownOrder('DELETE', sale, user, { name: 'DELETE /sales/{id}/order', step: 'cancel' });
    const body = jsonBody(res);
    if (res.status === 429) {
      cancelRateLimited.add(1);
      check429(res, body, STEP_CANCEL);
      sleep(Number(res.headers['Retry-After']) || 1);
      continue;
    }
    if (res.status === 409) {
      cancelsRefused.add(1);
      check(
        res,
        {
          '409 is {"error":"not_reserved","message"}': (r) => isJson(r) && isError(body, 'not_reserved'),
          'cancel before the deadline is 200 cancelled': () => false,
        },
        STEP_CANCEL,
      );
      console.warn(`cancel of ${sale}/${user} ${orderId} refused: ${String(res.body).slice(0, 200)}`);
      return false;
    }
    if (res.status !== 200) {
      unexpected(res, STEP_CANCEL, `DELETE /sales/${sale}/order ${user}`);
      return false;
    }
    const ok = check(
      res,
      {
        'cancel 200 is {"status":"cancelled","order_id"} with the order': (r) =>
          isJson(r) &&
          body !== null &&
          body.status === 'cancelled' &&
          body.order_id === orderId &&
          Object.keys(body).length === 2,
      },
      STEP_CANCEL,
    );
    if (ok) {
      cancelsDone.add(1);
      console.log(`cancelled ${sale} ${orderId}`);
    } else {
      console.warn(`cancel of ${sale}/${user} ${orderId} answered ${String(res.body).slice(0, 200)}`);
    }
    return ok;
  }
  console.warn(`cancel of ${sale}/${user} ${orderId}: rate limited 3 times`);
  return false;
}

// What the buyer of a fresh reservation does, 0..THINK_MS ms (at random) after its 201: `pay`
// (PAY_RATIO), `cancel` (CANCEL_RATIO) or `expire` (nothing). Returns what the service took:
// 'pay', 'cancel' or 'expire', or null when the payment or the cancel failed (counted as such
// already; the order may then stand anywhere).
function decide(sale, user, orderId, payBy) {
  const r = Math.random();
  if (r >= PAY_RATIO + CANCEL_RATIO) {
    leftToExpire.add(1);
    return 'expire';
  }
  if (THINK_MS > 0) sleep((THINK_MS / 1000) * Math.random());
  if (r < PAY_RATIO) return pay(sale, user, orderId, payBy) ? 'pay' : null;
  return cancel(sale, user, orderId) ? 'cancel' : null;
}

// ---- the scenarios -----------------------------------------------------------------------------

function crowdUser(sale, user) {
  const state = waitForStart(sale);
  if (state !== 'open') {
    if (state === 'sold_out') sawSoldOut.add(1);
    return;
  }
  const sentAt = Date.now();
  const first = buy(sale, user);
  const boughtAt = Date.now();
  const body = record(first, sale, user, sentAt);
  let orderId = (first.status === 201 || first.status === 409) && body !== null ? body.order_id : null;
  // The 201 that made the order (the first answer, or the repeat's when the first made none).
  let created = first.status === 201 ? body : null;
  if (Math.random() < RETRY_RATIO) {
    const againAt = Date.now();
    const again = buy(sale, user);
    const repeat = record(again, sale, user, againAt);
    if (first.status === 201) {
      const same = again.status === 409 && repeat !== null && repeat.order_id === orderId;
      retryAfterBuy.add(same);
      const ok = check(again, { 'a buyer asking again gets 409 with the same order_id': () => same }, STEP_BUY);
      if (!ok) console.warn(`buyer ${sale}/${user} asked again and got ${again.status}: ${String(again.body).slice(0, 200)}`);
    } else if (orderId === null && (again.status === 201 || again.status === 409) && repeat !== null) {
      orderId = repeat.order_id;
      if (again.status === 201) created = repeat;
    }
  }
  // A reservation: pay it, give it back or let it expire. The decision is known only for an order
  // whose 201 was seen (so was its `order` line): the driver checks it afterwards.
  let decision = null;
  if (created !== null && created.status === 'reserved' && created.order_id === orderId) {
    decision = decide(sale, user, orderId, Date.parse(created.pay_by));
  }
  if (orderId) awaitConfirmed(sale, user, orderId, boughtAt, decision);
}

export default function () {
  const n = exec.scenario.iterationInTest; // unique per iteration across all VUs of this scenario
  if (MODE === 'too_fast') {
    const user = `tf-${RUN_ID}-${n}`;
    const sentAt = Date.now();
    record(buy(TOO_FAST_SALE, user), TOO_FAST_SALE, user, sentAt);
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
    ...(WINDOW
      ? [
          `  (c) reserved ${count(data, 'reservations')}: paid ${count(data, 'payments_paid')}` +
            ` (of ${count(data, 'payment_events')} events, late ${count(data, 'payments_late')}),` +
            ` cancelled ${count(data, 'cancels_done')} (refused ${count(data, 'cancels_refused')},` +
            ` 429 ${count(data, 'cancel_rate_limited')}), left to expire ${count(data, 'left_to_expire')}`,
          `               pay ${trend(data, 'http_req_duration{step:pay}')}`,
          `               cancel ${trend(data, 'http_req_duration{step:cancel}')}`,
        ]
      : []),
    `  (d) order    ${count(data, 'order_polls')} polls  ${trend(data, 'http_req_duration{step:order}')};` +
      ` ${WINDOW ? 'stored' : 'confirmed'} ${count(data, 'orders_confirmed')},` +
      ` not ${WINDOW ? 'stored' : 'confirmed'} ${count(data, 'orders_unconfirmed')};` +
      ` 201 -> ${WINDOW ? 'stored' : 'confirmed'} ${trend(data, 'time_to_confirmed')}`,
    ...(WINDOW
      ? [
          `               stored as: reserved ${count(data, 'orders_seen_reserved')}, paid ${count(data, 'orders_seen_paid')},` +
            ` cancelled ${count(data, 'orders_seen_cancelled')}, expired ${count(data, 'orders_seen_expired')}`,
        ]
      : []),
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
