// The draw view of a drop on the live page, compiled into admin_page.html's one inline script
// (src/http/routes/admin_page.rs puts it at its marker line). For each drop the page lists, it
// asks GET /admin/drops/{drop}/draw/stats every DRAW_POLL_MS (409 `not_a_draw`: not in draw mode,
// asked again every DRAW_RECHECK_MS) and shows the draw's phase, its entries over the window, the
// run's results, how many winners' reservations are stored (awarded), the waitlist, and the
// winners' conversions (paid, reserved, expired, cancelled). The view is kept with its drop's row
// (renderDrops).
const DRAW_POLL_MS = 2000;
const DRAW_RECHECK_MS = 30000;
const DRAW_PHASE = { upcoming: "entries not open", open: "entries open", closed: "entries closed, to draw", drawing: "drawing", drawn: "drawn" };
const drawViews = new Map(); // drop -> {element, stats, due, busy}

// The drop's draw view (hidden until the drop is known to be a draw), fetched again when due.
function drawView(drop) {
  let view = drawViews.get(drop);
  if (view === undefined) {
    const element = document.getElementById("draw-template").content.firstElementChild.cloneNode(true);
    element.querySelector('[data-action="draw"]').addEventListener("click", () => runDraw(drop));
    view = { element, stats: null, due: 0, busy: false };
    drawViews.set(drop, view);
  }
  if (!view.busy && Date.now() >= view.due) fetchDraw(drop, view);
  return view.element;
}

async function fetchDraw(drop, view) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token === null) return;
  view.busy = true;
  view.due = Date.now() + DRAW_POLL_MS;
  try {
    const url = `/admin/drops/${encodeURIComponent(drop)}/draw/stats`;
    const response = await fetch(url, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    const body = await response.json().catch(() => ({}));
    if (response.ok) view.stats = body;
    else if (body.error === "not_a_draw" || body.error === "unknown_drop") {
      view.stats = null;
      view.due = Date.now() + DRAW_RECHECK_MS;
    } else showError(`The draw of drop ${drop}: ${response.status} ${body.error || ""}: ${body.message || "unexpected answer"}`);
  } catch (err) {
    // The service did not answer: the page's own poll reports that.
  } finally {
    view.busy = false;
  }
  renderDraw(view);
}

async function runDraw(drop) {
  if (!confirm(`Draw drop ${drop} now? Its entries close at once.`)) return;
  const token = sessionStorage.getItem(TOKEN_KEY);
  showActionError("");
  try {
    const url = `/admin/drops/${encodeURIComponent(drop)}/draw`;
    const response = await fetch(url, { method: "POST", headers: { Authorization: "Bearer " + token } });
    if (!response.ok) showActionError(`The draw of drop ${drop}: ${(await response.json().catch(() => ({}))).message || response.status}`);
  } catch (err) {
    showActionError(`The draw of drop ${drop}: no answer (the next poll shows whether it ran)`);
  }
  const view = drawViews.get(drop);
  if (view) view.due = 0;
}

function renderDraw(view) {
  const { element, stats } = view;
  element.hidden = stats === null;
  if (stats === null) return;
  const field = (name) => element.querySelector(`[data-field="${name}"]`);
  const now = serviceNow();
  const opens = Date.parse(stats.opens_at);
  const closes = Date.parse(stats.closes_at);
  const time = (ms) => new Date(ms).toLocaleTimeString("en-GB", { timeZone: "UTC" });
  field("phase").textContent = DRAW_PHASE[stats.phase] || stats.phase;
  field("phase").className = `badge draw-${stats.phase}`;
  field("window").textContent = stats.phase === "upcoming" ? `entries open ${time(opens)} UTC`
    : stats.phase === "open" ? `entries close ${time(closes)} UTC (in ${left(closes - now)})`
    : `entries ${time(opens)}–${time(closes)} UTC`;
  element.querySelector('[data-action="draw"]').hidden = stats.phase === "drawn";
  field("entries").textContent = number.format(stats.entries);
  field("won").textContent = `${number.format(stats.won)} (${number.format(stats.units_awarded)} units)`;
  field("waitlisted").textContent = `${number.format(stats.waitlisted)} of ${number.format(stats.waitlist_places)}`;
  field("lost").textContent = number.format(stats.lost);
  drawEntryBars(field("chart"), stats.entries_over_time);
  field("axis-open").textContent = time(opens);
  field("axis-close").textContent = time(closes);
  const w = stats.winners;
  const stored = w.reserved + w.paid + w.expired + w.cancelled + w.refunded;
  const progress = field("awarded");
  progress.max = Math.max(stats.won, 1);
  progress.value = Math.min(stored, stats.won);
  field("awarded-text").textContent = stats.won === 0
    ? (stats.phase === "drawn" ? "no winners" : "winners once drawn")
    : `${number.format(stored)} of ${number.format(stats.won)} winners' reservations stored`;
  for (const status of ["paid", "reserved", "expired", "cancelled", "refunded"]) field(status).textContent = number.format(w[status]);
  field("paid-head").textContent = number.format(w.paid);
  const o = stats.offered;
  field("offered").textContent = number.format(o.reserved + o.paid + o.expired + o.cancelled + o.refunded);
  field("offered-paid").textContent = number.format(o.paid);
  field("offered-reserved").textContent = number.format(o.reserved);
  field("conversion").textContent = stats.won === 0 ? "" : `· ${Math.round((100 * w.paid) / stats.won)}% of winners paid`;
}

// A count of milliseconds as H:MM:SS, rounded up.
function left(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const two = (n) => String(n).padStart(2, "0");
  return `${Math.floor(s / 3600)}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}`;
}

// The entries per slice of the window as bars, scaled to the busiest slice.
function drawEntryBars(svg, counts) {
  const peak = Math.max(1, ...counts);
  const bars = counts.map((count, i) => {
    const bar = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    const height = count / peak;
    for (const [name, value] of [["x", i + 0.1], ["width", 0.8], ["y", 1 - height], ["height", height]]) bar.setAttribute(name, value);
    bar.appendChild(document.createElementNS("http://www.w3.org/2000/svg", "title")).textContent = `${count} entries`;
    return bar;
  });
  svg.setAttribute("viewBox", `0 0 ${counts.length} 1`);
  svg.replaceChildren(...bars);
}
