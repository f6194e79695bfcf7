// A queued sale's crowd against seckill (issue 27), run by `cargo xtask load k6-queue`.
//
// The driver seeds SALE with a waiting room that is open already and a start STARTS_AT_MS a few
// seconds ahead. Two scenarios from the same --local-ips addresses:
//
//   crowd  constant-arrival-rate: ARRIVAL_RPS new users a second for ARRIVE_S seconds (some before
//          the start: the pre-queue; some after: the end of the line). Each user
//            (a) joins (POST /sales/{id}/queue): `prequeue` before the start, else a place;
//            (b) asks again after each answer's refresh_after_s (with jitter), sending the last
//                answer's ticket (GET /sales/{id}/queue?ticket=…), until admitted, sold_out or
//                closed (at most WAIT_LIMIT_S);
//            (c) once admitted buys with Seckill-Admission: 201 (printed as `order SALE USER ID`)
//                or 410 sold_out; every admission is printed as `admitted SALE USER PLACE`.
//   bots   from the start, BOT_RPS purchases a second for BOT_S seconds by users who never
//          joined: half without a token, half with a forged one. Each must get 403
//          not_admitted; a bot's 201 crosses the `bot_bought` threshold.
//
// AUTH as in flash-crowd.js is not offered: the buyer is the query's / body's user_id.
// The driver checks afterwards that every order is in Postgres, that every buyer in Postgres
// was admitted, and the sale's invariants. k6 exits 99 when a threshold fails.

import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter, Rate, Trend } from 'k6/metrics';
import { envInt, BASE_URL } from './lib/env.js';

const RUN_ID = __ENV.RUN_ID || String(Date.now());
const SALE = __ENV.SALE || 'queued-1';
const STARTS_AT_MS = envInt('STARTS_AT_MS', 0);
const ARRIVAL_RPS = Math.max(1, envInt('ARRIVAL_RPS', 40));
const ARRIVE_S = Math.max(1, envInt('ARRIVE_S', 15));
const BOT_RPS = envInt('BOT_RPS', 20);
const BOT_S = Math.max(1, envInt('BOT_S', 10));
const WAIT_LIMIT_S = envInt('WAIT_LIMIT_S', 90);
const P99_MS = envInt('P99_MS', 2000); // a stall, not slowness (load-tests/README.md)
const REQUEST_TIMEOUT = '5s';
const COUNTDOWN_S = Math.max(0, Math.ceil((STARTS_AT_MS - Date.now()) / 1000));

const joins = new Counter('queue_joins');
const polls = new Counter('queue_polls');
const admitted = new Counter('admitted');
const status201 = new Counter('status_201_created');
const status410 = new Counter('status_410_sold_out');
const sawSoldOut = new Counter('saw_sold_out'); // users told sold_out in line, who left
const closed = new Counter('saw_closed');
const timedOut = new Counter('queue_timed_out');
const admittedRefused = new Counter('admitted_buyer_refused'); // admitted, then not 201/410
const botRefused = new Counter('bot_refused'); // 403 not_admitted
const botBought = new Counter('bot_bought');
const statusOther = new Counter('status_other');
const status5xx = new Counter('status_5xx');
const rateLimited = new Rate('queue_rate_limited');
const timeToAdmitted = new Trend('time_to_admitted', true); // the start (or the join) -> admitted

export const options = {
  scenarios: {
    crowd: {
      executor: 'constant-arrival-rate',
      rate: ARRIVAL_RPS,
      timeUnit: '1s',
      duration: `${ARRIVE_S}s`,
      preAllocatedVUs: Math.min(2000, ARRIVAL_RPS * (COUNTDOWN_S + 5) + 50),
      maxVUs: 3000,
      gracefulStop: `${WAIT_LIMIT_S + 10}s`,
      exec: 'crowdUser',
    },
    ...(BOT_RPS > 0
      ? {
          bots: {
            executor: 'constant-arrival-rate',
            rate: BOT_RPS,
            timeUnit: '1s',
            duration: `${BOT_S}s`,
            startTime: `${COUNTDOWN_S}s`,
            preAllocatedVUs: 20,
            maxVUs: 100,
            exec: 'bot',
          },
        }
      : {}),
  },
  thresholds: {
    status_5xx: ['count==0'],
    status_other: ['count==0'],
    checks: ['rate>0.99'],
    http_req_duration: [`p(99)<${P99_MS}`],
    queue_timed_out: ['count==0'],
    admitted_buyer_refused: ['count==0'],
    bot_bought: ['count==0'],
    ...(BOT_RPS > 0 ? { bot_refused: ['count>0'] } : {}),
    queue_rate_limited: ['rate<0.01'],
    admitted: ['count>0'],
  },
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
  userAgent: 'seckill-load-tests/k6',
};

http.setResponseCallback(http.expectedStatuses(200, 201, 403, 410, 429));

const STATES = ['prequeue', 'waiting', 'admitted', 'sold_out', 'closed'];

function jsonBody(res) {
  try {
    return res.json();
  } catch (_) {
    return null;
  }
}

function unexpected(res, what) {
  if (res.status >= 500) status5xx.add(1);
  else statusOther.add(1);
  console.warn(`${what}: ${res.status} ${String(res.body).slice(0, 200)}`);
}

// One answer of the waiting room: its body when 200 and well formed, else null.
function standing(res, step, before) {
  rateLimited.add(res.status === 429);
  if (res.status === 429) return null;
  if (res.status !== 200) {
    unexpected(res, `${step} ${SALE}`);
    return null;
  }
  const body = jsonBody(res);
  const placed = body !== null && Number.isInteger(body.position) && body.position >= 1;
  check(res, {
    'queue answer has a state, a ticket and refresh_after_s': () =>
      body !== null && STATES.includes(body.state) && typeof body.ticket === 'string' && body.refresh_after_s > 0,
    'a place exactly from the start on': () =>
      body !== null && (body.state === 'prequeue' ? body.position === null : placed),
    'a place never changes': () => body === null || before === null || before.position === null || body.position === before.position,
    'an admission token exactly when admitted': () =>
      body !== null && (body.state === 'admitted') === (typeof body.admission === 'string'),
  });
  return body;
}

function queueUrl(user, ticket) {
  const query = `user_id=${encodeURIComponent(user)}${ticket ? `&ticket=${encodeURIComponent(ticket)}` : ''}`;
  return `${BASE_URL}/sales/${SALE}/queue?${query}`;
}

function buy(user, admission) {
  const headers = { 'Content-Type': 'application/json' };
  if (admission) headers['Seckill-Admission'] = admission;
  return http.post(`${BASE_URL}/buy`, JSON.stringify({ sale_id: SALE, user_id: user }), {
    headers,
    timeout: REQUEST_TIMEOUT,
    tags: { name: 'POST /buy' },
  });
}

export function crowdUser() {
  const user = `q-${RUN_ID}-${exec.scenario.iterationInTest}`;
  const joinedAt = Date.now();
  let line = null;
  while (line === null) {
    joins.add(1);
    line = standing(http.post(queueUrl(user), null, { timeout: REQUEST_TIMEOUT, tags: { name: 'POST /sales/{id}/queue' } }), 'join', null);
    if (line === null) {
      if (Date.now() - joinedAt > WAIT_LIMIT_S * 1000) return timedOut.add(1);
      sleep(1);
    }
  }
  while (line.state === 'prequeue' || line.state === 'waiting') {
    if (Date.now() - joinedAt > WAIT_LIMIT_S * 1000) {
      console.warn(`${user}: still ${line.state} after ${WAIT_LIMIT_S} s`);
      return timedOut.add(1);
    }
    sleep(Math.min(10, Math.max(0.2, line.refresh_after_s * (0.8 + 0.4 * Math.random()))));
    polls.add(1);
    const res = http.get(queueUrl(user, line.ticket), { timeout: REQUEST_TIMEOUT, tags: { name: 'GET /sales/{id}/queue' } });
    line = standing(res, 'poll', line) || line;
  }
  if (line.state === 'sold_out') return sawSoldOut.add(1);
  if (line.state === 'closed') return closed.add(1);
  admitted.add(1);
  timeToAdmitted.add(Date.now() - Math.max(joinedAt, STARTS_AT_MS));
  console.log(`admitted ${SALE} ${user} ${line.position}`);
  const res = buy(user, line.admission);
  const body = jsonBody(res);
  if (res.status === 201 && body !== null) {
    status201.add(1);
    console.log(`order ${SALE} ${user} ${body.order_id}`);
  } else if (res.status === 410) {
    status410.add(1);
  } else {
    admittedRefused.add(1);
    unexpected(res, `admitted ${user} buys`);
  }
}

export function bot() {
  const n = exec.scenario.iterationInTest;
  const user = `bot-${RUN_ID}-${n}`;
  // Half send no token, half a forged one in the token's shape (place.expiry.mac).
  const forged = n % 2 === 1 ? `1.${Date.now() + 60000}.${'A'.repeat(43)}` : null;
  const res = buy(user, forged);
  const body = jsonBody(res);
  if (res.status === 201) {
    botBought.add(1);
    console.warn(`bot ${user} bought: ${String(res.body).slice(0, 200)}`);
  } else if (res.status === 403 && body !== null && body.error === 'not_admitted') {
    botRefused.add(1);
  } else if (res.status !== 429) {
    unexpected(res, `bot ${user} buys`);
  }
}

// ---- end-of-test summary: the counters, the latencies and each threshold -----------------------

function count(data, name) {
  const m = data.metrics[name];
  return m ? m.values.count : 0;
}

export function handleSummary(data) {
  const lines = [`seckill k6 waiting room against ${BASE_URL} (run ${RUN_ID}, sale ${SALE})`];
  const names = ['queue_joins', 'queue_polls', 'admitted', 'status_201_created', 'status_410_sold_out', 'saw_sold_out',
    'saw_closed', 'queue_timed_out', 'admitted_buyer_refused', 'bot_refused', 'bot_bought', 'status_other', 'status_5xx'];
  lines.push(names.map((name) => `${name} ${count(data, name)}`).join(', '));
  for (const name of ['http_req_duration', 'time_to_admitted']) {
    const v = (data.metrics[name] || {}).values || {};
    const ms = (x) => (x === undefined ? '-' : `${x.toFixed(1)}ms`);
    lines.push(`${name}: p50 ${ms(v.med)} p95 ${ms(v['p(95)'])} p99 ${ms(v['p(99)'])} max ${ms(v.max)}`);
  }
  for (const [name, metric] of Object.entries(data.metrics)) {
    for (const [threshold, result] of Object.entries(metric.thresholds || {})) {
      lines.push(`threshold ${name} ${threshold}: ${result.ok ? 'ok' : 'CROSSED'}`);
    }
  }
  const out = { stdout: `${lines.join('\n')}\n` };
  if (__ENV.SUMMARY_JSON) out[__ENV.SUMMARY_JSON] = JSON.stringify(data, null, 2);
  return out;
}
