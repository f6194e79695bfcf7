// Flash crowd against seckill's POST /buy.
//
// Two modes (env MODE), run as two k6 invocations by `cargo xtask load k6`:
//
//   MODE=crowd     scenario `crowd`: ramping-arrival-rate up to PEAK_RPS new users per second,
//                  each iteration a distinct user buying in a random one of SALES sales; a share
//                  (RETRY_RATIO) sends the same purchase a second time, like a double click.
//                  Meant to run with `--local-ips 127.0.0.2-127.0.0.250`, so the crowd comes
//                  from ~250 client addresses and stays under the per-IP limit.
//   MODE=too_fast  scenario `too_fast`: TOO_FAST_RPS requests per second from ONE address
//                  (run it without --local-ips: every VU is 127.0.0.1), far over
//                  SECKILL_RATE_LIMIT, so most answers are 429 with Retry-After.
//
// k6 hands --local-ips addresses to VUs round-robin for the whole run, so one invocation cannot
// have both a crowd spread over many addresses and a single too-fast address; hence two runs.
//
// AUTH=jwt (for a service with SECKILL_AUTH=jwt): every request carries an HS256 token naming its
// user, signed here with JWT_SECRET (the service's SECKILL_JWT_SECRET) by k6/crypto's HMAC, and
// the body names no user_id. AUTH=none (the default): the body's user_id names the buyer.
//
// Every response is checked for its class (201/409/410/429) and its shape. Thresholds make k6
// exit 99 when the run was not clean (any 5xx, unexpected status, slow p99, failed checks, a
// limiter that let too much through or got in the way of the crowd).

import http from 'k6/http';
import crypto from 'k6/crypto';
import encoding from 'k6/encoding';
import exec from 'k6/execution';
import { check } from 'k6';
import { Counter, Rate } from 'k6/metrics';

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
const PEAK_RPS = Math.max(1, envInt('PEAK_RPS', 1500));
const START_RPS = Math.min(PEAK_RPS, envInt('START_RPS', 50));
const RAMP = __ENV.RAMP || '10s';
const HOLD = __ENV.HOLD || '20s';
const RETRY_RATIO = Math.min(1, envFloat('RETRY_RATIO', 0.1));
const PRE_VUS = Math.max(1, envInt('PRE_VUS', 250));
const MAX_VUS = Math.max(PRE_VUS, envInt('MAX_VUS', 600));
const P99_MS = envInt('P99_MS', 250);

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

const status201 = new Counter('status_201_created');
const status409 = new Counter('status_409_already_purchased');
const status410 = new Counter('status_410_sold_out');
const status429 = new Counter('status_429_rate_limited');
const status5xx = new Counter('status_5xx');
const statusOther = new Counter('status_other'); // anything else, e.g. 403/404/0 (timeout)
const rateLimited = new Rate('rate_limited'); // share of /buy answers that were 429
const retryAfterBuy = new Rate('retry_after_201_is_409'); // second attempt of a buyer

// ---- options -----------------------------------------------------------------------------------

function crowdOptions() {
  return {
    scenarios: {
      crowd: {
        executor: 'ramping-arrival-rate',
        startRate: START_RPS,
        timeUnit: '1s',
        preAllocatedVUs: PRE_VUS,
        maxVUs: MAX_VUS,
        stages: [
          { target: PEAK_RPS, duration: RAMP },
          { target: PEAK_RPS, duration: HOLD },
        ],
        gracefulStop: '5s',
      },
    },
    thresholds: {
      status_5xx: ['count==0'],
      status_other: ['count==0'],
      http_req_failed: ['rate<0.001'],
      http_req_duration: [`p(99)<${P99_MS}`],
      checks: ['rate>0.99'],
      // The crowd comes from ~250 addresses at a few requests per second each: the limiter must
      // hardly ever fire. Many 429s here mean the addresses were not spread (see README).
      rate_limited: ['rate<0.01'],
      // Every user who bought and asked again was told 409.
      retry_after_201_is_409: ['rate==1'],
    },
  };
}

function tooFastOptions() {
  const { limit, windowSecs } = parseRateLimit(RATE_LIMIT);
  const secs = durationSecs(TOO_FAST_DURATION);
  // A sliding window admits at most `limit` requests in any window: over `secs` seconds, at most
  // limit * (windows + 1) (the +1 covers the window that straddles the end).
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
http.setResponseCallback(http.expectedStatuses(201, 409, 410, 429));

// ---- the checks --------------------------------------------------------------------------------

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

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

// The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers), as seckill sends them.
const RATELIMIT_POLICY = /^"buy";q=\d+;w=\d+$/;
const RATELIMIT_STATE = /^"buy";r=\d+;t=\d+$/;

function record(res, sale, user) {
  const body = jsonBody(res);
  rateLimited.add(res.status === 429);
  switch (res.status) {
    case 201:
      status201.add(1);
      check(res, {
        '201 is JSON': (r) => isJson(r),
        '201 has order_id (UUID), sale_id, user_id': () =>
          body !== null && UUID.test(String(body.order_id)) && body.sale_id === sale && body.user_id === user,
        '201 has RateLimit-Policy and RateLimit': (r) => RATELIMIT_POLICY.test(r.headers['Ratelimit-Policy'] || '') &&
          RATELIMIT_STATE.test(r.headers['Ratelimit'] || ''),
      });
      break;
    case 409:
      status409.add(1);
      check(res, { '409 is {"error":"already_purchased","message"}': (r) => isJson(r) && isError(body, 'already_purchased') });
      break;
    case 410:
      status410.add(1);
      check(res, { '410 is {"error":"sold_out","message"}': (r) => isJson(r) && isError(body, 'sold_out') });
      break;
    case 429:
      status429.add(1);
      check(res, {
        '429 is {"error":"rate_limited","message"}': (r) => isJson(r) && isError(body, 'rate_limited'),
        '429 has Retry-After >= 1 (seconds)': (r) => /^[1-9]\d*$/.test(r.headers['Retry-After'] || ''),
        '429 has RateLimit with r=0': (r) => /;r=0;/.test(r.headers['Ratelimit'] || ''),
      });
      break;
    default:
      if (res.status >= 500) status5xx.add(1);
      else statusOther.add(1);
      check(res, { 'status is 201, 409, 410 or 429': () => false });
      console.warn(`unexpected ${res.status} for ${sale}/${user}: ${String(res.body).slice(0, 200)}`);
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
    tags: { name: 'POST /buy' },
  });
}

// ---- the scenarios -----------------------------------------------------------------------------

export default function () {
  const n = exec.scenario.iterationInTest; // unique per iteration across all VUs of this scenario
  if (MODE === 'too_fast') {
    const user = `tf-${RUN_ID}-${n}`;
    record(buy(TOO_FAST_SALE, user), TOO_FAST_SALE, user);
    return;
  }
  const sale = `${SALE_PREFIX}-${1 + Math.floor(Math.random() * SALES)}`;
  const user = `u-${RUN_ID}-${n}`;
  const first = buy(sale, user);
  record(first, sale, user);
  if (Math.random() < RETRY_RATIO) {
    const again = buy(sale, user);
    record(again, sale, user);
    if (first.status === 201) {
      retryAfterBuy.add(again.status === 409);
      const ok = check(again, { 'a buyer asking again gets 409': (r) => r.status === 409 });
      if (!ok) console.warn(`buyer ${sale}/${user} asked again and got ${again.status}: ${String(again.body).slice(0, 200)}`);
    }
  }
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

function thresholdLines(data) {
  const lines = [];
  for (const [name, metric] of Object.entries(data.metrics)) {
    for (const [expr, result] of Object.entries(metric.thresholds || {})) {
      lines.push(`    ${result.ok ? 'ok  ' : 'FAIL'} ${name} ${expr}`);
    }
  }
  return lines.sort();
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
    `  statuses     201 ${count(data, 'status_201_created')}  409 ${count(data, 'status_409_already_purchased')}` +
      `  410 ${count(data, 'status_410_sold_out')}  429 ${count(data, 'status_429_rate_limited')}` +
      `  5xx ${count(data, 'status_5xx')}  other ${count(data, 'status_other')}`,
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
