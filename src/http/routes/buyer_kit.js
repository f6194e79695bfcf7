// What the buyer pages (/sale/{id} and /drop/{id}) share, compiled into each page's one inline
// script (src/http/routes/page.rs puts it at the marker line of each page's script).
const kit = {
  // A count of milliseconds as [Nd ]HH:MM:SS, rounded up.
  duration(ms) {
    const s = Math.max(0, Math.ceil(ms / 1000));
    const two = (n) => String(n).padStart(2, "0");
    const days = Math.floor(s / 86400);
    const clock = `${two(Math.floor(s / 3600) % 24)}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}`;
    return days > 0 ? `${days}d ${clock}` : clock;
  },
  // The token's `sub`, read only to show who buys (the service verifies the token), else null.
  tokenSubject(jwt) {
    try {
      const bytes = Uint8Array.from(atob(jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")), (c) =>
        c.charCodeAt(0),
      );
      const claims = JSON.parse(new TextDecoder().decode(bytes)); // UTF-8, not atob's Latin-1
      return typeof claims.sub === "string" ? claims.sub : null;
    } catch {
      return null;
    }
  },
  // How a buyer is named to the service: the bearer token, else user_id.
  buyer(token, userId) {
    return token ? { headers: { Authorization: `Bearer ${token}` }, userId: null } : { headers: {}, userId };
  },
  // Fetches a proof-of-work challenge (`url`, GET /sales/{id}/challenge or /drops/{id}/challenge)
  // and solves it in the Web Worker /challenge-worker.js: {header (Seckill-Challenge), expiresAt
  // (server ms), ms, tries}. Throws an Error whose `code` is the service's error code, or
  // "abandoned" once `signal` (an AbortSignal, optional) aborts: the worker is stopped then.
  async solveChallenge(url, buyer, signal) {
    const params = new URLSearchParams();
    if (buyer.userId !== null) params.set("user_id", buyer.userId);
    const response = await fetch(`${url}?${params}`, { headers: buyer.headers, cache: "no-store" });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const retryAfter = Number(response.headers.get("Retry-After")) || 0;
      const message = body.message || `${response.status} ${response.statusText}`;
      throw Object.assign(new Error(message), { code: body.error, status: response.status, retryAfter });
    }
    const solution = await new Promise((resolve, reject) => {
      const abandoned = () => Object.assign(new Error("abandoned: the buyer changed"), { code: "abandoned" });
      if (signal && signal.aborted) return reject(abandoned());
      const worker = new Worker("/challenge-worker.js");
      const stop = () => { worker.terminate(); reject(abandoned()); };
      if (signal) signal.addEventListener("abort", stop, { once: true });
      const done = () => { worker.terminate(); if (signal) signal.removeEventListener("abort", stop); };
      worker.onmessage = (event) => {
        done();
        if (event.data.error) reject(new Error(event.data.error));
        else resolve(event.data);
      };
      worker.onerror = (event) => { done(); reject(new Error(event.message || "the solver failed")); };
      worker.postMessage(body.parameters);
    });
    const payload = JSON.stringify({ challenge: { parameters: body.parameters, signature: body.signature },
      solution: { counter: solution.counter, derivedKey: solution.derivedKey } });
    const header = btoa(Array.from(new TextEncoder().encode(payload), (b) => String.fromCharCode(b)).join(""));
    return { header, expiresAt: Date.parse(body.expires_at), ms: solution.time, tries: body.tries };
  },
  // When a page may solve ahead again after `err`, its `failures`-th failure in a row (local ms):
  // not by itself after a refusal only the buyer can mend (401, 403, 409), else after the
  // Retry-After asked or a backoff doubling from 1 s to 30 s. (A click still solves at once.)
  retryAt(err, failures) {
    if ([401, 403, 409].includes(err.status)) return Infinity;
    const backoff = 1000 * 2 ** Math.min(failures, 5);
    return Date.now() + Math.min(30000, Math.max(backoff, (err.retryAfter || 0) * 1000));
  },
};
