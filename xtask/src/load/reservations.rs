//! With a payment window, the flash sales' reservations once the crowd has gone: the driver waits
//! until none is open (each was paid, cancelled or has expired), then checks per sale that every
//! unit ended with exactly one paying buyer or back in the stock, from the admin status (Redis's
//! stock and released units, Postgres's tallies) and Postgres itself, and that the payments and
//! cancels k6 printed are the ones Postgres holds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use testbed::App;

use super::Load;
use super::orders::Console;
use crate::measure::checks::psql;

/// A number of the admin status (-1 when absent or null).
fn n(status: &Value, key: &str) -> i64 {
    status[key].as_i64().unwrap_or(-1)
}

/// No reservation of the sale is open, its queue has drained, and every unit of its cancelled and
/// expired orders is back in Redis.
fn settled(app: &App, sale: &str) -> bool {
    app.sale_status(sale).is_ok_and(|s| {
        n(&s, "queued") == 0 && n(&s, "reserved") == 0 && n(&s, "released") == n(&s, "cancelled") + n(&s, "expired")
    })
}

/// Waits up to `limit` until every sale is [`settled`]; whether they all were.
pub fn wait_settled(load: &Load, app: &App, sales: &[String], limit: Duration) -> bool {
    let started = Instant::now();
    loop {
        let open: Vec<&str> = sales.iter().map(String::as_str).filter(|sale| !settled(app, sale)).collect();
        if open.is_empty() {
            load.log(&format!(
                "every reservation paid, cancelled or expired and its unit back, after {:.1} s",
                started.elapsed().as_secs_f64()
            ));
            return true;
        }
        if started.elapsed() >= limit {
            load.log(&format!(
                "still open reservations, a queue or owed releases after {} s: {}",
                limit.as_secs(),
                open.join(", ")
            ));
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A sale's orders in Postgres: order id → status, and the releases still owed (cancelled or
/// expired orders whose unit is not back yet: `restocked_at` null).
fn postgres(load: &Load, sale: &str) -> anyhow::Result<(HashMap<String, String>, i64)> {
    let rows = psql(&load.services, &format!("select order_id, status from orders where sale_id = '{sale}'"))?;
    let orders = rows
        .lines()
        .filter_map(|row| row.split_once('|').map(|(id, status)| (id.to_string(), status.to_string())))
        .collect();
    let owed = psql(
        &load.services,
        &format!(
            "select count(*) from orders where sale_id = '{sale}' and status in ('cancelled', 'expired') and restocked_at is null"
        ),
    )?;
    Ok((orders, owed.trim().parse().unwrap_or(-1)))
}

/// The figures of all the sales checked, for the total line.
#[derive(Debug, Default)]
pub struct Totals {
    stock_initial: i64,
    stock_left: i64,
    paid: i64,
    cancelled: i64,
    expired: i64,
    released: i64,
    late_payments: i64,
    printed_paid: usize,
    printed_cancelled: usize,
}

/// Two invariant lines for `sale` (a sale of `window_ms`, settled): the units, then k6's payments
/// and cancels against Postgres. Counts a failure per broken promise.
pub fn check(
    load: &mut Load,
    app: &App,
    sale: &str,
    window_ms: u64,
    console: &Console,
    totals: &mut Totals,
) -> anyhow::Result<()> {
    let status = app.sale_status(sale)?;
    let (orders, owed) = postgres(load, sale)?;
    let count = |state: &str| orders.values().filter(|s| *s == state).count() as i64;
    let (reserved, paid, cancelled, expired) = (count("reserved"), count("paid"), count("cancelled"), count("expired"));
    let (initial, left, sold, released) =
        (n(&status, "stock_initial"), n(&status, "stock_left"), n(&status, "sold"), n(&status, "released"));
    let admin = [n(&status, "reserved"), n(&status, "paid"), n(&status, "cancelled"), n(&status, "expired")];
    let late = n(&status, "late_payments");

    let v = |ok: bool| if ok { "ok" } else { "BROKEN" };
    let units = [
        n(&status, "payment_window_ms") == window_ms as i64,
        reserved == 0 && initial == left + paid + reserved,
        left >= 0,
        released == cancelled + expired,
        sold == orders.len() as i64 && sold == paid + cancelled + expired + reserved,
        admin == [reserved, paid, cancelled, expired],
        owed == 0,
    ];
    println!(
        "invariant {sale} reservations: window {} ms [{}], stock_initial {initial} = stock_left {left} + paid {paid} + reserved {reserved} [{}], stock_left >= 0 [{}], released {released} = cancelled {cancelled} + expired {expired} [{}], sold {sold} = Postgres orders {} = paid + cancelled + expired + reserved [{}], admin status = Postgres [{}], releases owed {owed} [{}], late payments {late}",
        n(&status, "payment_window_ms"),
        v(units[0]),
        v(units[1]),
        v(units[2]),
        v(units[3]),
        orders.len(),
        v(units[4]),
        v(units[5]),
        v(units[6]),
    );
    if !units[5] {
        load.log(&format!(
            "{sale}: the admin status says reserved/paid/cancelled/expired {admin:?}, Postgres {:?}",
            [reserved, paid, cancelled, expired]
        ));
    }

    // k6's payments and cancels: each in Postgres as printed, and no others.
    let printed = |set: &std::collections::HashSet<(String, String)>| -> Vec<String> {
        set.iter().filter(|(s, _)| s == sale).map(|(_, id)| id.clone()).collect()
    };
    let (printed_paid, printed_cancelled) = (printed(&console.paid), printed(&console.cancelled));
    let is = |ids: &[String], state: &str| ids.iter().filter(|id| orders.get(*id).is_some_and(|s| s == state)).count();
    let (paid_ok, cancelled_ok) = (is(&printed_paid, "paid"), is(&printed_cancelled, "cancelled"));
    let both = printed_paid.iter().filter(|id| printed_cancelled.contains(id)).count();
    let k6 = [
        paid_ok == printed_paid.len(),
        printed_paid.len() as i64 == paid,
        cancelled_ok == printed_cancelled.len(),
        printed_cancelled.len() as i64 == cancelled,
        both == 0,
    ];
    println!(
        "invariant {sale} reservations (k6): paid printed {}, paid in Postgres {paid_ok}/{} [{}], = Postgres paid {paid} [{}]; cancelled printed {}, cancelled in Postgres {cancelled_ok}/{} [{}], = Postgres cancelled {cancelled} [{}]; both paid and cancelled {both} [{}]",
        printed_paid.len(),
        printed_paid.len(),
        v(k6[0]),
        v(k6[1]),
        printed_cancelled.len(),
        printed_cancelled.len(),
        v(k6[2]),
        v(k6[3]),
        v(k6[4]),
    );
    for (id, state) in printed_paid
        .iter()
        .map(|id| (id, "paid"))
        .chain(printed_cancelled.iter().map(|id| (id, "cancelled")))
        .filter(|(id, state)| orders.get(*id).is_none_or(|s| s != state))
        .take(5)
    {
        load.log(&format!("{sale}: k6 printed {id} as {state}, Postgres has {:?}", orders.get(id)));
    }
    load.failures += units.iter().chain(&k6).filter(|ok| !**ok).count() as u32;

    totals.stock_initial += initial;
    totals.stock_left += left;
    totals.paid += paid;
    totals.cancelled += cancelled;
    totals.expired += expired;
    totals.released += released;
    totals.late_payments += late.max(0);
    totals.printed_paid += printed_paid.len();
    totals.printed_cancelled += printed_cancelled.len();
    Ok(())
}

/// The total line over the sales checked.
pub fn print_totals(sales: usize, t: &Totals) {
    println!(
        "reservations, {sales} sale(s): stock_initial {} = stock_left {} + paid {}; released {} = cancelled {} + expired {}; k6 paid {}, cancelled {}; late payments {}",
        t.stock_initial,
        t.stock_left,
        t.paid,
        t.released,
        t.cancelled,
        t.expired,
        t.printed_paid,
        t.printed_cancelled,
        t.late_payments
    );
}
