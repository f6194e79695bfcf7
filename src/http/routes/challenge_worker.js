"use strict";
// seckill's proof-of-work solver, run as a Web Worker by the buyer page (GET /challenge-worker.js).
// It solves an ALTCHA PoW v2 challenge of GET /sales/{id}/challenge in its deterministic form:
// the counter c, from 0 up, whose PBKDF2-SHA-256(password = nonce bytes ‖ c as 4 big-endian bytes,
// salt, parameters.cost iterations, keyLength bytes) starts with parameters.keyPrefix. WebCrypto
// derives natively; a few derivations run at once to keep its threads busy.
// Message in: the challenge's parameters. Message out: {counter, derivedKey (hex), time (ms)}, or
// {error} when it cannot solve (no WebCrypto on a page not served over HTTPS or from localhost).
const AT_ONCE = 4;
const bytes = (hex) => Uint8Array.from(hex.match(/../g) || [], (h) => parseInt(h, 16));
const hexOf = (buffer) => Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");

async function derive(parameters, nonce, salt, counter) {
  const password = new Uint8Array(nonce.length + 4);
  password.set(nonce);
  new DataView(password.buffer).setUint32(nonce.length, counter);
  const key = await crypto.subtle.importKey("raw", password, "PBKDF2", false, ["deriveBits"]);
  const algorithm = { name: "PBKDF2", hash: "SHA-256", salt, iterations: parameters.cost };
  return new Uint8Array(await crypto.subtle.deriveBits(algorithm, key, parameters.keyLength * 8));
}

onmessage = ({ data: parameters }) => {
  solve(parameters).catch((err) => postMessage({ error: String((err && err.message) || err) }));
};

async function solve(parameters) {
  if (!(self.crypto && crypto.subtle)) throw new Error("this browser offers no WebCrypto here (HTTPS needed)");
  const started = performance.now();
  const nonce = bytes(parameters.nonce), salt = bytes(parameters.salt), prefix = bytes(parameters.keyPrefix);
  const matches = (key) => prefix.every((b, i) => key[i] === b);
  for (let first = 0; first < 2 ** 32; first += AT_ONCE) {
    const counters = Array.from({ length: AT_ONCE }, (_, i) => first + i);
    const keys = await Promise.all(counters.map((c) => derive(parameters, nonce, salt, c)));
    const found = keys.findIndex(matches);
    if (found >= 0) {
      postMessage({ counter: counters[found], derivedKey: hexOf(keys[found]), time: performance.now() - started });
      return;
    }
  }
  throw new Error("no counter solves this challenge");
}
