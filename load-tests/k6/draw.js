// A storm of draw entries against seckill (issue 53), run by `cargo xtask load k6-draw`: distinct
// entrants enter a drop in draw mode through two instances, one of which the driver may kill -9
// mid-storm and restart.
//
// The driver seeds the drop DROP in draw mode (its SIZES, comma-separated short names, the
// `per_buyer` PER_BUYER, entries open now and closing after the storm) and starts the instances
// BASE_URLS (comma-separated; the second is the one killed at KILL_AT_MS, a Unix time in ms, 0:
// none: the driver plans the kill on its own clock, and a sale's buyers beside this storm,
// draw-buyers.js, go by the same instant). One scenario:
//
//   entrants  constant-arrival-rate: RATE new entrants a second for DURATION_S seconds, from the
//             --local-ips addresses, every other one through each instance. Each POSTs one entry
//             (POST /drops/{DROP}/entries): a random subset of the sizes in a random order (best
//             first), quantity 1, or up to PER_BUYER for a QTY_MULTI share (percent). It must answer
//             201 `entered`; a REPEAT share (percent) then enters again on purpose, which must answer
//             409 `already_entered` with the first entry. An entrant whose instance is the killed
//             one and fails (no answer, or 503) from KILL_AT_MS on tries the other instance once: 201,
//             or 409 `already_entered` when the lost answer's entry had been accepted. An entrant
//             answered 503 (or nothing within 5 s) otherwise retries once, 0.5 s later, on the same
//             instance, as the 503 asks (unavailable_retried): the same two answers. Every
//             accepted entrant is printed as `entered DROP USER`.
//
// Thresholds: no 5xx or unexpected answer (the killed instance's failures are counted apart, in
// killed_failures), every repeat refused with the first entry, the entry p99 under P99_MS, checks
// all passed. The driver then compares the printed entrants with Postgres's `draw_entries`, runs
// the draw and verifies its record. k6 exits 99 when a threshold fails.

import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { arrivals, envInt } from './lib/env.js';
import { killedFailure as killedAt } from './lib/kill.js';

const RUN_ID = __ENV.RUN_ID || String(Date.now());
const BASE_URLS = (__ENV.BASE_URLS || 'http://127.0.0.1:8080').split(',').map((u) => u.replace(/\/+$/, ''));
const DROP = __ENV.DROP || 'draw';
const SIZES = (__ENV.SIZES || '38,39,40,41,42,43').split(',');
const PER_BUYER = Math.max(1, envInt('PER_BUYER', 2));
const RATE = Math.max(1, envInt('RATE', 500));
const DURATION_S = Math.max(2, envInt('DURATION_S', 10));
const QTY_MULTI = envInt('QTY_MULTI', 25); // percent of entrants asking more than one unit
const REPEAT = envInt('REPEAT', 2); // percent of entrants entering twice on purpose
const KILL_AT_MS = envInt('KILL_AT_MS', 0);
const P99_MS = envInt('P99_MS', 2000); // a stall, not slowness (load-tests/README.md)
const REQUEST_TIMEOUT = '5s';

const accepted = new Counter('entries_accepted');
const repeats = new Counter('repeats_refused');
const repeatWrong = new Counter('repeat_answered_wrongly');
const killedFailures = new Counter('killed_failures');
const retried = new Counter('retried_elsewhere');
const unavailableRetried = new Counter('unavailable_retried');
const retryFoundEntered = new Counter('retry_found_entered');
const status5xx = new Counter('status_5xx');
const statusOther = new Counter('status_other');
const entryDuration = new Trend('entry_duration', true);

export const options = {
  discardResponseBodies: false,
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'],
  scenarios: {
    entrants: arrivals('entrant', RATE, DURATION_S),
  },
  thresholds: {
    entries_accepted: ['count>0'],
    repeat_answered_wrongly: ['count==0'],
    status_5xx: ['count==0'],
    status_other: ['count==0'],
    entry_duration: [`p(99)<${P99_MS}`],
    checks: ['rate==1'],
  },
};

function enter(base, user, sizes, quantity) {
  const response = http.post(`${base}/drops/${DROP}/entries`, JSON.stringify({ sizes, quantity, user_id: user }), {
    headers: { 'Content-Type': 'application/json' },
    timeout: REQUEST_TIMEOUT,
    tags: { step: 'enter' },
  });
  if (response.status !== 0) entryDuration.add(response.timings.duration);
  let body = {};
  try { body = response.json(); } catch { /* checked by the caller */ }
  return { response, body };
}

const sameEntry = (entry, sizes, quantity) =>
  !!entry && entry.quantity === quantity && JSON.stringify(entry.sizes) === JSON.stringify(sizes);

// A failure of the killed instance from the kill on: no answer, or 503 while it goes down.
const killedFailure = (index, response) => killedAt(KILL_AT_MS, BASE_URLS, index, response);

export function entrant() {
  const n = exec.scenario.iterationInTest;
  const user = `draw-${RUN_ID}-${n}`;
  const order = SIZES.slice();
  for (let i = order.length - 1; i > 0; i--) { // a random order of the sizes: the preferences
    const j = Math.floor(Math.random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const sizes = order.slice(0, 1 + Math.floor(Math.random() * order.length));
  const quantity = Math.random() * 100 < QTY_MULTI ? 1 + Math.floor(Math.random() * PER_BUYER) : 1;
  let index = n % BASE_URLS.length;
  let { response, body } = enter(BASE_URLS[index], user, sizes, quantity);
  let retry = false;
  if (killedFailure(index, response)) {
    killedFailures.add(1);
    retried.add(1);
    retry = true;
    index = (index + 1) % BASE_URLS.length;
    ({ response, body } = enter(BASE_URLS[index], user, sizes, quantity));
  } else if (response.status === 503 || response.status === 0) {
    // 503 `unavailable` says "retry shortly", and the entry may have been made before the answer
    // was lost: the entrant retries once, half a second later, on the same instance.
    unavailableRetried.add(1);
    retry = true;
    sleep(0.5);
    ({ response, body } = enter(BASE_URLS[index], user, sizes, quantity));
  }
  if (retry && response.status === 409 && body.error === 'already_entered') {
    // The killed instance had accepted it before its answer was lost.
    retryFoundEntered.add(1);
    const ok = check(body, { 'the retry finds the same entry': (b) => sameEntry(b.entry, sizes, quantity) });
    if (ok) {
      accepted.add(1);
      console.log(`entered ${DROP} ${user}`);
    }
    return;
  }
  if (response.status === 201) {
    accepted.add(1);
    console.log(`entered ${DROP} ${user}`);
    check(body, { 'entry answered 201 entered': (b) => b.state === 'entered' && sameEntry(b, sizes, quantity) });
  } else if (response.status >= 500 || response.status === 0) {
    status5xx.add(1);
    console.warn(`${user} via ${index}: ${response.status} ${response.body}`);
    return;
  } else {
    statusOther.add(1);
    console.warn(`${user} via ${index}: ${response.status} ${response.body}`);
    return;
  }
  if (Math.random() * 100 >= REPEAT) return;
  // A deliberate second entry, with other preferences: refused, the first one kept.
  const other = (index + 1) % BASE_URLS.length;
  const again = enter(BASE_URLS[other], user, [SIZES[0]], 1);
  if (killedFailure(other, again.response)) {
    killedFailures.add(1); // a repeat's answer is not needed
    return;
  }
  const ok = again.response.status === 409 && again.body.error === 'already_entered' &&
    sameEntry(again.body.entry, sizes, quantity);
  if (ok) repeats.add(1);
  else {
    repeatWrong.add(1);
    console.warn(`${user} repeat: ${again.response.status} ${again.response.body}`);
  }
}

export function handleSummary(data) {
  const out = {};
  if (__ENV.SUMMARY_JSON) out[__ENV.SUMMARY_JSON] = JSON.stringify(data);
  const count = (name) => (data.metrics[name] ? data.metrics[name].values.count : 0);
  const d = data.metrics.entry_duration ? data.metrics.entry_duration.values : {};
  const ms = (v) => (v === undefined ? '-' : v.toFixed(1));
  out.stdout = `draw: ${count('entries_accepted')} entries accepted; repeats refused ${count('repeats_refused')} ` +
    `(wrong ${count('repeat_answered_wrongly')}); killed instance's failures ${count('killed_failures')}, ` +
    `retried elsewhere ${count('retried_elsewhere')}, 503 or no answer retried ${count('unavailable_retried')} ` +
    `(found entered ${count('retry_found_entered')}); ` +
    `5xx ${count('status_5xx')}, other ${count('status_other')}; entry p95 ${ms(d['p(95)'])} ms, ` +
    `p99 ${ms(d['p(99)'])} ms\n`;
  return out;
}
