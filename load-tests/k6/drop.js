// A drop against seckill (issue 41), run by `cargo xtask load k6-drop`: a product in sizes, a
// per-customer limit across them, a pause and a top-up while the crowd buys.
//
// The driver seeds the sales SIZES (comma-separated, `<group>.<size>`) of one group, open now,
// each with its stock and `per_buyer` PER_BUYER: by default as a drop with one line (DROP_LINE,
// below), with `--line=false` one by one. Two scenarios:
//
//   crowd     constant-arrival-rate: ARRIVAL_RPS new users a second for DURATION_S seconds, from
//             the --local-ips addresses. Each user buys a random quantity (1 to PER_BUYER) of a
//             random size, then, while it has units of its allowance left, the rest in another
//             size, moving on after sold_out / insufficient_stock / sale_paused. It knows what it
//             holds, so every answer is checked against the rules:
//               201 with more than the allowance left           -> over_limit_bought (must be 0)
//               409 limit_reached while the allowance had room  -> limit_refused_wrongly (0)
//               409 limit_reached whose `held` is not the user's -> limit_refused_wrongly (0)
//               201 on the paused size while it is paused       -> bought_while_paused (0)
//             Every 201 is printed as `order SALE USER ORDER_ID`.
//   operator  one iteration: at PAUSE_AT_S pauses the first size (POST .../pause), resumes it
//             PAUSE_S later; at TOPUP_AT_S adds TOPUP units to the second (POST .../stock).
//
// With DROP_LINE (the drop's id, the SIZES' group, seeded with PUT /admin/drops/{DROP_LINE} with a
// waiting room and no proof of work; the driver's default), the drop is run as drop platforms run one (issue 52): each user first joins the
// drop's one line (POST /drops/{DROP_LINE}/queue), polls it with its ticket until admitted, and
// buys every size with its one admission token (Seckill-Admission); the operator pauses, resumes
// and tops up the whole drop (POST /admin/drops/{DROP_LINE}/pause|resume|stock), so the pause
// covers every size. Thresholds add: every user joins once (line_joins), no buy without a token.
//
// The driver then checks each size's invariants in units (stock_initial = stock_left + units
// sold), that the 201s are the orders in Postgres, that no buyer holds more than PER_BUYER units
// across the group, and that the top-up was added. k6 exits 99 when a threshold fails.

import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { arrivals, envInt, BASE_URL } from './lib/env.js';

const RUN_ID = __ENV.RUN_ID || String(Date.now());
const SIZES = (__ENV.SIZES || 'drop.40,drop.41,drop.42').split(',');
const PER_BUYER = Math.max(1, envInt('PER_BUYER', 2));
const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || '';
const ARRIVAL_RPS = Math.max(1, envInt('ARRIVAL_RPS', 200));
const DURATION_S = Math.max(2, envInt('DURATION_S', 10));
const PAUSE_AT_S = envInt('PAUSE_AT_S', 2);
const PAUSE_S = Math.max(1, envInt('PAUSE_S', 2));
const TOPUP_AT_S = envInt('TOPUP_AT_S', 5);
const TOPUP = envInt('TOPUP', 50);
const P99_MS = envInt('P99_MS', 2000); // a stall, not slowness (load-tests/README.md)
const REQUEST_TIMEOUT = '5s';
const DROP_LINE = __ENV.DROP_LINE || '';

const status201 = new Counter('status_201_created');
const units201 = new Counter('units_bought');
const limitRefused = new Counter('limit_refused');
const limitWrong = new Counter('limit_refused_wrongly');
const overLimit = new Counter('over_limit_bought');
const pausedSeen = new Counter('sale_paused_seen');
const boughtWhilePaused = new Counter('bought_while_paused');
const soldOut = new Counter('sold_out_or_short');
const status5xx = new Counter('status_5xx');
const statusOther = new Counter('status_other');
const operatorFailed = new Counter('operator_failed');
const buyDuration = new Trend('buy_duration', true);
const lineJoins = new Counter('line_joins');
const lineAdmitted = new Counter('line_admitted');
const lineLeft = new Counter('line_left_unadmitted');

export const options = {
  discardResponseBodies: false,
  scenarios: {
    crowd: arrivals('crowd', ARRIVAL_RPS, DURATION_S),
    operator: {
      executor: 'shared-iterations',
      exec: 'operator',
      vus: 1,
      iterations: 1,
      maxDuration: `${DURATION_S + 30}s`,
    },
  },
  thresholds: {
    over_limit_bought: ['count==0'],
    limit_refused_wrongly: ['count==0'],
    bought_while_paused: ['count==0'],
    status_5xx: ['count==0'],
    status_other: ['count==0'],
    operator_failed: ['count==0'],
    status_201_created: ['count>0'],
    ...(DROP_LINE ? { line_joins: ['count>0'], line_admitted: ['count>0'] } : {}),
    limit_refused: ['count>0'],
    sale_paused_seen: ['count>0'],
    'buy_duration': [`p(99)<${P99_MS}`],
    checks: ['rate==1'],
  },
};

function admin(path, body) {
  const response = http.post(`${BASE_URL}${path}`, body === undefined ? null : JSON.stringify(body), {
    headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' },
    timeout: REQUEST_TIMEOUT,
    tags: { step: 'admin' },
  });
  if (!check(response, { 'admin action answered 200': (r) => r.status === 200 })) {
    operatorFailed.add(1);
    console.warn(`admin ${path}: ${response.status} ${response.body}`);
  }
}

// Seconds since the scenarios started (both start at once), on this machine's clock: each VU has
// its own copy of module state, so the crowd knows the pause by the operator's fixed offsets.
const elapsedS = () => (Date.now() - exec.scenario.startTime) / 1000;

export function operator() {
  // A drop with a line: its one switch, over every size (and its line); else the first size's.
  const target = DROP_LINE ? `/admin/drops/${DROP_LINE}` : `/admin/sales/${SIZES[0]}`;
  sleep(PAUSE_AT_S);
  admin(`${target}/pause`, { reason: 'k6 drop' });
  sleep(PAUSE_S);
  admin(`${target}/resume`, DROP_LINE ? { reason: 'k6 drop' } : undefined);
  sleep(Math.max(0, TOPUP_AT_S - elapsedS()));
  if (TOPUP > 0 && DROP_LINE) {
    const size = SIZES[1].slice(SIZES[1].indexOf('.') + 1);
    admin(`/admin/drops/${DROP_LINE}/stock`, { add: { [size]: TOPUP }, reason: 'k6 drop top-up' });
  } else if (TOPUP > 0) {
    admin(`/admin/sales/${SIZES[1]}/stock`, { add: TOPUP, reason: 'k6 drop top-up' });
  }
}

// Joins the drop's line once and polls it with the ticket until admitted: the admission token,
// or null when the line closes first (sold out, ended, the run's end near).
function admission(user) {
  const url = `${BASE_URL}/drops/${DROP_LINE}/queue?user_id=${encodeURIComponent(user)}`;
  let response = http.post(url, null, { timeout: REQUEST_TIMEOUT, tags: { step: 'join' } });
  if (!check(response, { 'join answered 200': (r) => r.status === 200 })) {
    console.warn(`${user} joins: ${response.status} ${response.body}`);
    return null;
  }
  lineJoins.add(1);
  let body = response.json();
  while (!body.admission) {
    if (body.state === 'closed' || body.state === 'sold_out' || elapsedS() > DURATION_S + 20) {
      lineLeft.add(1);
      return null;
    }
    sleep(Math.min(body.refresh_after_s, 0.5));
    response = http.get(`${url}&ticket=${encodeURIComponent(body.ticket)}`, { timeout: REQUEST_TIMEOUT, tags: { step: 'poll' } });
    if (!check(response, { 'poll answered 200': (r) => r.status === 200 })) return null;
    body = response.json();
  }
  lineAdmitted.add(1);
  return body.admission;
}

function buy(user, sale, quantity, token) {
  const sent = elapsedS();
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers['Seckill-Admission'] = token;
  const response = http.post(`${BASE_URL}/buy`, JSON.stringify({ sale_id: sale, user_id: user, quantity }), {
    headers,
    timeout: REQUEST_TIMEOUT,
    tags: { step: 'buy' },
  });
  buyDuration.add(response.timings.duration);
  let body = {};
  try { body = response.json(); } catch { /* checked below */ }
  return { response, body, sent, answered: elapsedS() };
}

export function crowd() {
  const user = `drop-${RUN_ID}-${exec.scenario.iterationInTest}`;
  const token = DROP_LINE ? admission(user) : null;
  if (DROP_LINE && !token) return;
  let held = 0;
  const order = SIZES.map((_, i) => i);
  for (let i = order.length - 1; i > 0; i--) { // a random order of the sizes
    const j = Math.floor(Math.random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  for (const s of order) {
    const left = PER_BUYER - held;
    // Now and then ask one unit more than the allowance left: the limit must refuse it whole.
    const ask = Math.random() < 0.15 ? left + 1 : 1 + Math.floor(Math.random() * left);
    const { response, body, sent, answered } = buy(user, SIZES[s], ask, token);
    const inPause = (s === 0 || DROP_LINE) && sent >= PAUSE_AT_S + 0.5 && answered <= PAUSE_AT_S + PAUSE_S - 0.5;
    if (response.status === 201) {
      status201.add(1);
      units201.add(body.quantity);
      console.log(`order ${SIZES[s]} ${user} ${body.order_id}`);
      if (held + body.quantity > PER_BUYER || body.quantity !== ask) overLimit.add(1);
      if (inPause) boughtWhilePaused.add(1);
      held += body.quantity;
      if (held >= PER_BUYER) return;
    } else if (response.status === 409 && body.error === 'limit_reached') {
      limitRefused.add(1);
      if (held + ask <= PER_BUYER || body.held !== held) {
        limitWrong.add(1);
        console.warn(`${user}: limit_reached holding ${held} asking ${ask}: ${response.body}`);
      }
    } else if (response.status === 403 && body.error === 'sale_paused') {
      pausedSeen.add(1);
    } else if (response.status === 410 || (response.status === 409 && body.error === 'insufficient_stock')) {
      soldOut.add(1);
    } else if (response.status >= 500 || response.status === 0) {
      status5xx.add(1);
      console.warn(`${user}: ${response.status} ${response.body}`);
      return; // the purchase may have been made: the driver's Postgres check covers it
    } else {
      statusOther.add(1);
      console.warn(`${user}: ${response.status} ${response.body}`);
    }
  }
}

export function handleSummary(data) {
  const out = {};
  if (__ENV.SUMMARY_JSON) out[__ENV.SUMMARY_JSON] = JSON.stringify(data);
  const count = (name) => (data.metrics[name] ? data.metrics[name].values.count : 0);
  out.stdout = `drop: ${count('status_201_created')} orders, ${count('units_bought')} units; limit refusals ` +
    `${count('limit_refused')} (wrong ${count('limit_refused_wrongly')}), over the limit ${count('over_limit_bought')}, ` +
    `paused answers ${count('sale_paused_seen')} (bought while paused ${count('bought_while_paused')}), ` +
    `sold out or short ${count('sold_out_or_short')}, 5xx ${count('status_5xx')}, other ${count('status_other')}` +
    (DROP_LINE ? `; line: ${count('line_joins')} joins, ${count('line_admitted')} admitted, ` +
      `${count('line_left_unadmitted')} left unadmitted` : '') + '\n';
  return out;
}
