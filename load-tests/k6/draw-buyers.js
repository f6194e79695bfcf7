// A plain sale selling beside a draw (issue 53: "a sale selling beside it keeps its p99"), run by
// `cargo xtask load k6-draw` as a second k6 process next to draw.js: paced purchases before the
// entry storm (the baseline), during it, while Postgres catches up, and while the draw runs.
//
// The driver seeds the sale SALE (no payment window, open now, stock for every purchase) and
// starts the instances BASE_URLS (comma-separated; the second is the one killed at KILL_AT_MS, a
// Unix time in ms, 0: none). One scenario:
//
//   buyers  constant-arrival-rate: RATE new buyers a second for at most DURATION_S seconds (the
//           driver stops k6 with SIGINT once the draw has run), from the --local-ips addresses,
//           every other one through each instance. Each POSTs one purchase
//           (POST /buy {sale_id, user_id}), which must answer 201. A buyer whose instance is the
//           killed one and fails (no answer, or 503) from KILL_AT_MS on tries the other instance
//           once: 201, or 409 `already_purchased` when the lost answer's purchase had gone through.
//           A buyer answered 503 (or nothing within 5 s) otherwise retries once, 0.5 s later, on
//           the same instance, as the 503 asks: the same two answers.
//           Once the draw has run the driver pauses the sale (403 `sale_paused` from then on, so
//           that no purchase in flight when k6 stops sells unseen), then stops k6.
//
// Each buyer prints `buy START_MS TOTAL_MS STATUS RETRIED VIA` (the Unix time its first request was
// sent, its requests' times, blocked + connecting + k6's duration, summed (not the 0.5 s before a retry), the last answer's
// status, 1 if it retried (on the other instance after the kill, or after a 503), the index of the instance that answered last)
// and, when it holds an order, `order SALE USER ORDER_ID`. The driver splits the buys into phases
// by START_MS and computes each phase's p50 and p99 itself: k6's own summary cannot know when the
// draw ran. Unexpected answers are also printed as warnings.

import http from 'k6/http';
import { sleep } from 'k6';
import exec from 'k6/execution';
import { arrivals, envInt } from './lib/env.js';
import { killedFailure as killedAt } from './lib/kill.js';

const RUN_ID = __ENV.RUN_ID || String(Date.now());
const BASE_URLS = (__ENV.BASE_URLS || 'http://127.0.0.1:8080').split(',').map((u) => u.replace(/\/+$/, ''));
const SALE = __ENV.SALE || 'beside';
const RATE = Math.max(1, envInt('RATE', 200));
const DURATION_S = Math.max(2, envInt('DURATION_S', 600));
const KILL_AT_MS = envInt('KILL_AT_MS', 0);
const REQUEST_TIMEOUT = '5s';

export const options = {
  discardResponseBodies: false,
  scenarios: {
    buyers: arrivals('buyer', RATE, DURATION_S),
  },
};

function buy(base, user) {
  const response = http.post(`${base}/buy`, JSON.stringify({ sale_id: SALE, user_id: user }), {
    headers: { 'Content-Type': 'application/json' },
    timeout: REQUEST_TIMEOUT,
    tags: { step: 'buy' },
  });
  let body = {};
  try { body = response.json(); } catch { /* an unexpected answer: printed by the caller */ }
  return { response, body };
}

// A failure of the killed instance from the kill on: no answer, or 503 while it goes down.
const killedFailure = (index, response) => killedAt(KILL_AT_MS, BASE_URLS, index, response);

// A request's time as the buyer waits it: queued for a connection, connecting, then k6's
// http_req_duration (sending, waiting, receiving), in ms with k6's sub-millisecond precision.
const took = (response) => response.timings.blocked + response.timings.connecting + response.timings.duration;

export function buyer() {
  const n = exec.scenario.iterationInTest;
  const user = `beside-${RUN_ID}-${n}`;
  let index = n % BASE_URLS.length;
  const start = Date.now();
  let { response, body } = buy(BASE_URLS[index], user);
  let total = took(response);
  let retried = 0;
  if (killedFailure(index, response)) {
    retried = 1;
    index = (index + 1) % BASE_URLS.length;
    ({ response, body } = buy(BASE_URLS[index], user));
    total += took(response);
  } else if (response.status === 503 || response.status === 0) {
    // 503 (`outcome_unknown`, `unavailable`) asks for a retry: once, 0.5 s later, same instance.
    retried = 1;
    sleep(0.5);
    ({ response, body } = buy(BASE_URLS[index], user));
    total += took(response);
  }
  console.log(`buy ${start} ${total.toFixed(3)} ${response.status} ${retried} ${index}`);
  const held = response.status === 201 || (retried && response.status === 409 && body.error === 'already_purchased');
  if (held && body.order_id) console.log(`order ${SALE} ${user} ${body.order_id}`);
  // The driver pauses the sale once the draw has run, then stops k6: no buy in flight then sells.
  else if (!(response.status === 403 && body.error === 'sale_paused')) {
    console.warn(`${user} via ${index}: ${response.status} ${response.body}`);
  }
}

export function handleSummary(data) {
  const out = {};
  if (__ENV.SUMMARY_JSON) out[__ENV.SUMMARY_JSON] = JSON.stringify(data);
  const iterations = data.metrics.iterations ? data.metrics.iterations.values.count : 0;
  out.stdout = `draw buyers: ${iterations} buys (their times per phase: the driver's lines below)\n`;
  return out;
}
