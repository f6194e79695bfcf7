//! The storm rows of the report: the polling storm on `GET /sales/{id}` (its req/s and the
//! Redis commands per second meanwhile), the repeat storm (its req/s, app CPU per request,
//! and whether its 409s carried the buyers' order ids), and a queued sale's waiting room: the
//! join storm, the ticket polling storm (Redis commands per second, whatever the rate) and the
//! Redis calls of a purchase with an admission against one on a sale without a queue.

use super::builder::Builder;
use super::model::{
    COMPARED_BUYS, POLLERS, REASKED, REPEAT_BUYERS, RedisCalls, Row, group, status_text, us_per_request,
};

/// The polling storm's bound on Redis, whatever the request rate. Per second: at most 5 reads of
/// the registry (SMEMBERS) and 5 snapshots of the sale (MULTI, HMGET, GET, SCARD, XLEN, EXEC and a
/// TIME), 40 commands; the worker's own (XREADGROUP, and XLEN and XRANGE of each sale's stream for
/// the metrics) add about 15 with the two sales of the app. Twice that leaves room for jitter.
const POLL_REDIS_MAX: f64 = 100.0;

/// The ticket polling storm's bound, whatever the request rate. Per second: at most 5 reads of
/// the line (`lua/admit.lua`, about 8 commands each with its own), the sale's snapshot (the route
/// checks the sale is queued: 5 × 7), the registry (5), and the worker's and the metrics' own for
/// the app's four sales by then (about 60). Set after the first run measured 157/s at 50,847 req/s.
const TICKET_REDIS_MAX: f64 = 200.0;

/// A purchase with an admission must not cost another round trip: its EVALSHA per purchase may
/// exceed the plain sale's by the noise of the background calls (the worker's, the janitor's)
/// during a slow sequential run, far below the 1.0 a second call would add.
const EXTRA_CALLS_MAX: f64 = 0.5;

pub fn rows(b: &mut Builder, rows: &mut Vec<Row>) {
    rows.extend(poll_row(b));
    rows.extend(repeat_row(b));
    rows.extend(join_row(b));
    rows.extend(ticket_row(b));
    rows.extend(queued_buy_row(b));
}

fn join_row(b: &mut Builder) -> Option<Row> {
    let (mut row, _) = storm_row(b, "http-queue-join", "POST /sales/{id}/queue join storm (queued sale)", "200")?;
    row.target = "200 with a place".into();
    row.met = row.path_ok;
    Some(row)
}

fn ticket_row(b: &mut Builder) -> Option<Row> {
    let label = format!("GET /sales/{{id}}/queue ticket polling storm ({POLLERS} buyers)");
    let (mut row, _) = storm_row(b, "http-queue-poll", &label, "200")?;
    let per_s = row.extra_f64("redis_cmds_per_s");
    row.target = format!("Redis ≤ {TICKET_REDIS_MAX:.0} commands/s");
    row.met = Some(row.path_ok == Some(true) && per_s.is_some_and(|r| r <= TICKET_REDIS_MAX));
    Some(row)
}

/// Purchases with an admission on the queued sale against purchases on a sale without a queue:
/// the same script calls (EVALSHA) per purchase, so the admission adds no round trip.
fn queued_buy_row(b: &mut Builder) -> Option<Row> {
    let label = "POST /buy with an admission: Redis calls per purchase";
    let Some(text) = b.r.meta("queue-buy.calls") else {
        b.problems.push(format!("{label}: no result"));
        return None;
    };
    let calls: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let n = calls["purchases"].as_f64().unwrap_or(0.0).max(1.0);
    let per = |side: &str, command: Option<&str>| -> f64 {
        let by = calls[side].as_object().cloned().unwrap_or_default();
        by.iter().filter(|(c, _)| command.is_none_or(|w| c.as_str() == w)).filter_map(|(_, v)| v.as_f64()).sum::<f64>()
            / n
    };
    let (queued, plain) = (per("queued", Some("evalsha")), per("plain", Some("evalsha")));
    let (queued_all, plain_all) = (per("queued", None), per("plain", None));
    let mut row = Row {
        key: "queue-buy-calls".into(),
        scenario: label.into(),
        unit: "EVALSHA/purchase",
        rate: Some(queued),
        detail: format!(
            "{COMPARED_BUYS} purchases one at a time from the driver, each with its Seckill-Admission on the queued sale, then {COMPARED_BUYS} on a sale without a queue: EVALSHA per purchase {queued:.2} against {plain:.2} (the purchase's one call, and the worker's and janitor's calls meanwhile); every Redis command per purchase (a script's own included: the admitted place recorded) {queued_all:.2} against {plain_all:.2}"
        ),
        target: format!("EVALSHA ≤ plain + {EXTRA_CALLS_MAX}"),
        met: Some(queued > 0.0 && queued <= plain + EXTRA_CALLS_MAX),
        ..Default::default()
    };
    row.extra("queued_calls", &calls["queued"]);
    row.extra("plain_calls", &calls["plain"]);
    Some(row)
}

/// The Redis commands of a row, as text: "Redis executed 114 commands … = 54.0/s, one per 2,174
/// requests (xlen 21, …)". They include the commands a script ran (INFO commandstats counts
/// those too), so they bound the app's calls from above.
fn redis_text(calls: &RedisCalls, seconds: f64, requests: u64) -> String {
    let mut by: Vec<(&String, &u64)> = calls.by_command.iter().collect();
    by.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
    let by: Vec<String> = by.iter().map(|(c, n)| format!("{c} {}", group(**n as f64))).collect();
    let total = calls.total() as f64;
    let per_request = match total / requests.max(1) as f64 {
        r if r >= 0.01 => format!("{r:.2} per request"),
        _ => format!("one per {} requests", group(requests as f64 / total.max(1.0))),
    };
    format!(
        "Redis executed {} commands (a script's own calls included) in the row's {seconds:.1} s = {:.1}/s, {per_request} ({})",
        group(total),
        total / seconds,
        by.join(", ")
    )
}

/// Finds a storm row's run and starts its row: figures, statuses, Redis commands.
fn storm_row(b: &mut Builder, key: &str, label: &str, code: &str) -> Option<(Row, crate::measure::wrk::WrkOut)> {
    let (run, out) = match b.r.wrk(key) {
        Ok(found) => found,
        Err(why) => {
            b.problems.push(format!("{label}: no result ({why})"));
            return None;
        }
    };
    let (path_ok, _) = b.expect_share(&out, code, 0.9999, label);
    let mut row = b.http_row(key, label.into(), run, &out);
    row.path_ok = Some(path_ok);
    row.extra("app_us_per_req", us_per_request(run, out.requests, "seckill"));
    let seconds = run.usage.wall_s;
    let mut detail = vec![b.r.meta(&format!("{key}.detail")).unwrap_or("").to_string()];
    if let Some(calls) = b.r.redis_calls.get(key).filter(|_| seconds > 0.0) {
        detail.push(redis_text(calls, seconds, out.requests));
        row.extra("redis_cmds", calls.total());
        row.extra("redis_cmds_per_s", calls.total() as f64 / seconds);
        row.extra("redis_cmds_per_req", (out.requests > 0).then(|| calls.total() as f64 / out.requests as f64));
        row.extra("redis_by_command", &calls.by_command);
    }
    detail.push(status_text(&out.statuses));
    row.detail = detail.into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join("; ");
    Some((row, out))
}

fn poll_row(b: &mut Builder) -> Option<Row> {
    let label = "GET /sales/{id} polling storm (upcoming sale)";
    let (mut row, _) = storm_row(b, "http-sale-poll", label, "200")?;
    let per_s = row.extra_f64("redis_cmds_per_s");
    row.target = format!("Redis ≤ {POLL_REDIS_MAX:.0} commands/s");
    row.met = Some(row.path_ok == Some(true) && per_s.is_some_and(|r| r <= POLL_REDIS_MAX));
    Some(row)
}

fn repeat_row(b: &mut Builder) -> Option<Row> {
    let label = "POST /buy repeat storm (500 buyers again: 409)";
    let (mut row, out) = storm_row(b, "http-buy-repeat", label, "409")?;
    let (sampled, with_id) =
        (out.bodies.get("sampled").copied().unwrap_or(0), out.bodies.get("order_id").copied().unwrap_or(0));
    let same: usize = b.r.meta("http-buy-repeat.same_order").and_then(|s| s.parse().ok()).unwrap_or(0);
    if sampled == 0 || with_id < sampled {
        b.problems.push(format!("{label}: {with_id} of {sampled} sampled bodies carried an order_id"));
    }
    if same < REASKED {
        b.problems.push(format!("{label}: {same} of {REASKED} buyers asked again got 409 with their 201's order id"));
    }
    row.detail += &format!(
        "; {} of {} bodies sampled (every 16th) carried an order_id; after the row {same} of {REASKED} buyers (of the {REPEAT_BUYERS}) asked again got 409 with their 201's order id",
        group(with_id as f64),
        group(sampled as f64)
    );
    row.extra("bodies_sampled", sampled);
    row.extra("bodies_with_order_id", with_id);
    row.extra("reasked_same_order", same);
    row.target = "409 with the order id".into();
    row.met = Some(row.path_ok == Some(true) && sampled > 0 && with_id == sampled && same == REASKED);
    Some(row)
}
