// The instance a driver kills -9 mid-run (draw.js, draw-buyers.js): the last of `urls`, killed at
// `killAtMs` (a Unix time in ms, planned on the driver's clock; 0: never).

// Whether a request to `urls[index]` failed because of the kill: the killed instance, from half a
// second before the kill on, with no answer or a 503 while it went down.
export const killedFailure = (killAtMs, urls, index, response) =>
  killAtMs > 0 && urls.length > 1 && index === urls.length - 1 && Date.now() >= killAtMs - 500 &&
  (response.status === 0 || response.status === 503);
