// Settings from the environment (`k6 run -e NAME=value`), shared by the k6 scripts.

// A non-negative integer, or `fallback` when unset or empty; anything else stops the run.
export function envInt(name, fallback) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${raw}`);
  return n;
}

// A non-negative number, or `fallback` when unset or empty; anything else stops the run.
export function envFloat(name, fallback) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got ${raw}`);
  return n;
}

// The service's base URL (BASE_URL), without a trailing slash.
export const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');

// A constant-arrival-rate scenario running `exec`: `rate` new iterations a second for `durationS`
// seconds (the crowds of drop.js and draw.js).
export function arrivals(exec, rate, durationS) {
  return {
    executor: 'constant-arrival-rate',
    exec,
    rate,
    timeUnit: '1s',
    duration: `${durationS}s`,
    preAllocatedVUs: Math.min(200, rate),
    maxVUs: Math.max(200, rate * 2),
  };
}
