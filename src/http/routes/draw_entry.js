// The draw on the drop's page (a drop in draw mode: GET /drops/{id} has `draw`), compiled into
// drop_page.html's one inline script (src/http/routes/drop_page.rs puts it at its marker line).
// Instead of the line and Buy, the buyer ranks the sizes they would take (best first), picks a
// quantity within the drop's limit and enters once (POST /drops/{id}/entries, with the drop's
// proof of work solved ahead when the draw asks one). The page then reads the entry back
// (GET /drops/{id}/entry) every ENTRY_MS while it may change: entered, then won or offered (a
// reservation: order, pay_by, its status from GET /sales/{sale}/order, Cancel), waitlisted (a
// place), lost, or any other state the service names. Every value from the network is shown
// with textContent.
const ENTRY_MS = 2000;
const DRAW_STATE = { upcoming: "Entries not open yet", open: "Entries open", closed: "Entries closed" };
const ENTRY_STATE = { entered: "Entered", won: "Won", offered: "Offered", waitlisted: "Waitlisted", lost: "Not drawn" };
const FINAL_ORDER = ["paid", "cancelled", "expired", "refunded"];
let ranked = [];          // the sizes picked for the entry, best first (their short names)
let entry = null;         // the buyer's last GET /drops/{id}/entry (or 201) answer
let entryKnown = false;   // the entry was asked for the current buyer (entry null then: none)
let entryFor = -1;        // the identity the entry was read for
let entering = false;
let entryTimer = null;
let reservation = null;   // {order_id, status} of a won or offered entry's order
let drawCancelling = false;
let pseudonym = null;     // {who, hex}: SHA-256("<drop>\n<user>"), the buyer's name in the record

const drawMode = () => Boolean(drop && drop.draw);
const drawUrl = (tail) => `/drops/${encodeURIComponent(dropId)}/${tail}`;
const entrySale = () => (entry && entry.size ? `${dropId}.${entry.size}` : null);
const holdsOrder = () => entry !== null && Boolean(entry.order_id) && Boolean(entry.size);
function drawSay(text, kind = "error") {
  $("draw-message").textContent = text;
  $("draw-message").className = kind;
}
// The proof of work to solve ahead: the drop's, while this buyer may still enter.
function drawProofUrl() {
  const may = drop.draw.state === "open" && entryKnown && entry === null && !entering;
  return may ? drawUrl("challenge") : null;
}

// The buyer's entry (404 `no_entry`: none yet), and a won or offered entry's order status.
async function readEntry() {
  clearTimeout(entryTimer);
  if (!drawMode() || !named()) return;
  const mine = identity;
  const who = buyer();
  const query = who.userId === null ? "" : `?user_id=${encodeURIComponent(who.userId)}`;
  let delay = ENTRY_MS;
  try {
    const response = await fetch(drawUrl("entry") + query, { headers: who.headers, cache: "no-store" });
    const body = await response.json().catch(() => ({}));
    if (mine !== identity) return;
    if (response.ok) setEntry(body);
    else if (body.error === "no_entry") { entry = null; entryKnown = true; entryFor = mine; }
    else if (response.status === 429) delay = retryAfter(response) * 1000;
    else if (response.status === 401) drawSay(`Paste your token: ${body.message || "this service needs one"}.`);
    else { drawSay(body.message || `${response.status} ${response.statusText}`); delay = 5000; }
    if (holdsOrder()) await readReservation(mine, who, query);
  } catch (err) {
    drawSay(`The service does not answer (${err.message}).`);
    delay = 5000;
  }
  if (mine !== identity) return;
  render();
  const settled = entry !== null && (entry.state === "lost"
    || (holdsOrder() && reservation !== null && FINAL_ORDER.includes(reservation.status)));
  if (!settled && (entry !== null || !entryKnown)) entryTimer = setTimeout(readEntry, delay);
}
function setEntry(body) {
  if (entry === null || entry.state !== body.state) drawSay("");
  if (reservation !== null && reservation.order_id !== body.order_id) reservation = null;
  entry = body;
  entryKnown = true;
  entryFor = identity;
}
async function readReservation(mine, who, query) {
  const response = await fetch(`/sales/${encodeURIComponent(entrySale())}/order${query}`, { headers: who.headers, cache: "no-store" });
  const body = await response.json().catch(() => ({}));
  if (mine === identity && response.ok && body.status && body.status !== "none") {
    reservation = { order_id: entry.order_id, status: body.status === "queued" ? "reserved" : body.status };
  }
}

$("enter").addEventListener("click", async () => {
  if (!drawMode() || ranked.length === 0 || !named()) return;
  const who = buyer();
  const mine = identity;
  const request = { sizes: [...ranked], quantity: Number($("draw-quantity").value) || 1 };
  if (who.userId !== null) request.user_id = who.userId;
  entering = true;
  render();
  try {
    let work = {};
    try {
      const header = await takeProof(drawUrl("challenge"));
      if (header) work = { "Seckill-Challenge": header };
    } catch (err) {
      if (mine === identity) drawSay(`The proof of work could not be made: ${err.message}`);
      return;
    }
    if (mine !== identity) return;
    const response = await fetch(drawUrl("entries"), {
      method: "POST", cache: "no-store", body: JSON.stringify(request),
      headers: { ...who.headers, ...work, "Content-Type": "application/json" },
    });
    const body = await response.json().catch(() => ({}));
    if (mine !== identity) return;
    if (response.status === 201) {
      setEntry(body);
      drawSay("");
      setTimeout(readEntry, ENTRY_MS);
      pollDrop(); // the entries count, at once
    } else if (body.error === "already_entered") {
      drawSay("You had entered already: here is your entry.");
      readEntry();
    } else if (response.status === 429) {
      drawSay(`Slow down: retry in ${retryAfter(response)} s.`);
    } else if (response.status === 401) {
      drawSay(`Paste your token: ${body.message || "this service needs one"}.`);
    } else {
      drawSay(body.message || `${response.status} ${response.statusText}`);
      pollDrop();
    }
  } catch (err) {
    drawSay(`The service does not answer (${err.message}); entering again is safe.`);
  } finally {
    entering = false;
    render();
  }
});

$("draw-cancel").addEventListener("click", async () => {
  const sale = entrySale();
  if (!sale) return;
  const who = buyer();
  const mine = identity;
  const query = who.userId === null ? "" : `?user_id=${encodeURIComponent(who.userId)}`;
  drawCancelling = true;
  render();
  try {
    const response = await fetch(`/sales/${encodeURIComponent(sale)}/order${query}`, { method: "DELETE", headers: who.headers, cache: "no-store" });
    const body = await response.json().catch(() => ({}));
    if (mine !== identity) return;
    if (response.ok) {
      reservation = { order_id: entry.order_id, status: "cancelled" };
      drawSay("");
    } else {
      drawSay(body.message || `${response.status} ${response.statusText}`);
      readEntry();
    }
  } catch (err) {
    drawSay(`The service does not answer (${err.message}); cancelling again is safe.`);
  } finally {
    drawCancelling = false;
    render();
  }
});

// Another buyer: forget the entry and the sizes picked (drop_page.html's changed() calls this).
function drawChanged() {
  clearTimeout(entryTimer);
  entry = null;
  entryKnown = false;
  entryFor = -1;
  reservation = null;
  ranked = [];
  drawSay("");
}

function renderDraw(now) {
  $("draw").hidden = !drawMode();
  if (!drawMode()) return;
  const draw = drop.draw;
  if (named() && entryFor !== identity && !entering && Date.now() - identitySince > 300) {
    entryFor = identity;
    readEntry();
  }
  const drawn = draw.draw_state === "drawn";
  $("draw-state").textContent = drawn ? "Drawn" : DRAW_STATE[draw.state] || draw.state;
  $("draw-state").className = `badge ${drawn ? "drawn" : draw.state}`;
  const opens = Date.parse(draw.opens_at);
  const closes = Date.parse(draw.closes_at);
  $("draw-window").textContent = draw.state === "upcoming" ? `Entries open at ${clock(opens)} (in ${kit.duration(opens - now)}).`
    : draw.state === "open" ? `Entries close at ${clock(closes)} (in ${kit.duration(closes - now)}); then the draw runs.`
    : `Entries ${closes > now ? "closed early" : `closed at ${clock(closes)}`}; ${drawn ? "the draw has run." : "the draw runs in a moment."}`;
  const entries = Number(draw.entries).toLocaleString("en");
  $("draw-entries").textContent = draw.state === "open" ? `${entries} entered so far` : `${entries} entries`;
  $("draw-commitment").textContent = draw.commitment;
  $("draw-seed-line").hidden = !draw.seed;
  $("draw-seed").textContent = draw.seed || "";
  $("draw-record-line").hidden = !drawn;
  $("draw-record-later").hidden = drawn;
  $("draw-record").href = drawUrl("draw");
  renderEntryForm();
  renderEntry(now);
  renderPseudonym();
  const solving = proof !== null && proof.header === null && !proof.none && proof.url === drawUrl("challenge");
  $("draw-proof").hidden = !(solving || (solved && entry === null));
  $("draw-proof").textContent = solving ? "Proof of work: solving…"
    : solved ? `Proof of work: solved in ${(solved.ms / 1000).toFixed(2)} s (${solved.tries.toLocaleString("en")} tries on average)` : "";
}
const clock = (ms) => `${new Date(ms).toISOString().slice(11, 19)} UTC`;

// The form: each size a button (a click adds it as the next choice, or takes it back), the
// quantity (1 to the drop's limit) and Enter, while entries are open and the buyer has none.
let shownRanks = "";
function renderEntryForm() {
  const open = drop.draw.state === "open";
  $("draw-form").hidden = !named() || !entryKnown || entry !== null || !open;
  $("draw-closed-note").hidden = !named() || !entryKnown || entry !== null || open;
  $("draw-closed-note").textContent = drop.draw.state === "upcoming" ? "Come back when entries open: the form is here then."
    : "Entries are closed: you did not enter this draw.";
  if ($("draw-form").hidden) return;
  const shown = JSON.stringify([ranked, drop.sizes.map((s) => s.size)]);
  if (shown !== shownRanks) {
    shownRanks = shown;
    $("draw-sizes").replaceChildren(...drop.sizes.map((size) => {
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.size = size.size;
      const rank = ranked.indexOf(size.size);
      button.setAttribute("aria-pressed", String(rank >= 0));
      button.append(size.size, Object.assign(document.createElement("small"), { textContent: rank >= 0 ? `choice ${rank + 1}` : "add" }));
      button.addEventListener("click", () => {
        ranked = rank >= 0 ? ranked.filter((s) => s !== size.size) : [...ranked, size.size].slice(0, 6);
        render();
      });
      const item = document.createElement("li");
      item.append(button);
      return item;
    }));
  }
  const select = $("draw-quantity");
  if (select.options.length !== drop.per_buyer) {
    const was = Number(select.value) || 1;
    select.replaceChildren(...Array.from({ length: drop.per_buyer }, (_, i) => new Option(String(i + 1), String(i + 1))));
    select.value = String(Math.min(was, drop.per_buyer));
  }
  $("enter").disabled = entering || ranked.length === 0 || Date.now() < retryAt;
  $("enter").textContent = entering ? "Entering…" : ranked.length === 0 ? "Pick your sizes" : "Enter the draw";
  $("draw-pick-note").textContent = ranked.length === 0
    ? "Click the sizes you would take, best first. One entry per buyer; the order you enter in plays no part."
    : `Your choices, best first: ${ranked.join(", ")}. You win at most one size, in the quantity you ask (at most ${drop.per_buyer}).`;
}

// The entry, and its result once drawn.
function renderEntry(now) {
  $("draw-entry").hidden = entry === null;
  if (entry === null) return;
  const state = entry.state;
  $("entry-state").textContent = ENTRY_STATE[state] || state;
  $("entry-state").className = `badge ${state}`;
  $("entry-what").textContent = `Sizes ${entry.sizes.join(", ")} (best first) × ${entry.quantity} · entered at ${clock(Date.parse(entry.entered_at))}`;
  const size = entry.size ? `size ${entry.size}${entry.quantity > 1 ? ` × ${entry.quantity}` : ""}` : "";
  $("entry-headline").textContent = {
    entered: "You are in the draw.",
    won: `You won ${size}!`,
    offered: `A unit came back: you are offered ${size}.`,
    waitlisted: `You are on the waitlist, place #${entry.position}.`,
    lost: "Not drawn this time.",
  }[state] || `Your entry: ${state}.`;
  $("entry-note").textContent = {
    entered: drop.draw.draw_state === "drawn" ? "The draw has run: your result is on its way."
      : "The draw runs once entries close; your result shows here, keep this page open or come back.",
    waitlisted: "If a unit of a size you listed comes back, it is offered down the waitlist in place order.",
    lost: "Every entry was ranked from the committed seed; yours came after the units and the waitlist ran out.",
  }[state] || "";
  renderReservation(now);
}

function renderReservation(now) {
  $("entry-order").hidden = !holdsOrder();
  if (!holdsOrder()) return;
  $("entry-order-id").textContent = entry.order_id;
  const status = reservation ? reservation.status : "reserved";
  $("entry-order-state").textContent = status;
  $("entry-order-state").className = `badge ${status}`;
  const due = entry.pay_by ? Date.parse(entry.pay_by) : null;
  const open = status === "reserved" && (due === null || due > now);
  $("entry-pay-by").hidden = !open || due === null;
  if (due !== null) $("entry-pay-by-text").textContent = `${clock(due)}: ${kit.duration(due - now)} left`;
  $("entry-order-note").textContent = {
    reserved: open ? "Reserved for you: pay before the deadline, or the unit goes back." : "The deadline has passed.",
    paid: "Paid: it is yours.", cancelled: "Cancelled: the unit went back.",
    expired: "Expired: not paid in time, the unit went back.", refunded: "Refunded.",
  }[status] || "";
  $("draw-cancel").hidden = !open;
  $("draw-cancel").disabled = drawCancelling;
  $("draw-cancel").textContent = drawCancelling ? "Cancelling…" : "Cancel the reservation";
  $("entry-sale-link").href = `/sale/${encodeURIComponent(entrySale())}`;
}

// `text` as one word of a POSIX shell: single-quoted, each ' closed, escaped and reopened (an id
// may hold a quote, a % or a backslash: never a command, nor a printf format).
function shellWord(text) {
  return `'${text.replace(/'/g, "'\\''")}'`;
}

// The buyer's pseudonym in the record, SHA-256("<drop>\n<user>") (where the page can hash; else
// the command that does).
function renderPseudonym() {
  const who = token() ? kit.tokenSubject(token()) : $("user-id").value.trim();
  $("draw-you").hidden = !who;
  if (!who) return;
  if (pseudonym !== null && pseudonym.who === who) {
    $("draw-pseudonym").textContent = pseudonym.hex || `printf '%s\\n%s' ${shellWord(dropId)} ${shellWord(who)} | sha256sum`;
    return;
  }
  pseudonym = { who, hex: null };
  if (!(window.crypto && crypto.subtle)) return;
  const mine = pseudonym;
  crypto.subtle.digest("SHA-256", new TextEncoder().encode(`${dropId}\n${who}`)).then((digest) => {
    mine.hex = Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
    render();
  });
}
