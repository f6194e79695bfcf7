//! Every order a k6 run saw created, checked once the queues drained: the script prints each 201
//! as `order SALE USER ORDER_ID` to its console (a file, `--console-output`), and with a payment
//! window each payment the service took as `paid SALE ORDER_ID` and each cancel as
//! `cancelled SALE ORDER_ID`. Each order must be in Postgres with that id and the status its buyer
//! left it in (`confirmed` without a window; `paid`, `cancelled`, else `expired` with one), and
//! `GET /sales/{id}/order` must answer that status with that id.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use seckill::domain::UserId;
use secrecy::SecretString;
use testbed::App;

use super::Load;
use crate::measure::checks::psql;
use crate::measure::http;

/// One 201 as the generator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub sale: String,
    pub user: String,
    pub order_id: String,
}

/// What a k6 console file says: the 201s, the reservations paid and cancelled (sale, order id),
/// the buyers a waiting room admitted (sale, user), the draw entries accepted (drop, user, in
/// the order printed), and its other lines (k6's warnings).
#[derive(Debug, Default)]
pub struct Console {
    pub created: Vec<Created>,
    pub paid: HashSet<(String, String)>,
    pub cancelled: HashSet<(String, String)>,
    pub admitted: HashSet<(String, String)>,
    pub entered: Vec<(String, String)>,
    pub other: Vec<String>,
}

impl Console {
    /// The status `order` must have in Postgres and on the order route now that every
    /// reservation was settled: `confirmed` in a sale without a payment window; with one `paid`
    /// or `cancelled` as the console says, else `expired`.
    pub fn fate(&self, order: &Created, windowed: bool) -> &'static str {
        let key = (order.sale.clone(), order.order_id.clone());
        match () {
            _ if !windowed => "confirmed",
            _ if self.paid.contains(&key) => "paid",
            _ if self.cancelled.contains(&key) => "cancelled",
            _ => "expired",
        }
    }
}

/// Reads a k6 console file: its `order SALE USER ORDER_ID`, `entered DROP USER`,
/// `paid SALE ORDER_ID`, `cancelled SALE ORDER_ID` and `admitted SALE USER PLACE` lines, and the rest.
pub fn read(path: &Path) -> anyhow::Result<Console> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut console = Console::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match line.split(' ').collect::<Vec<_>>()[..] {
            ["order", sale, user, order_id] => {
                console.created.push(Created { sale: sale.into(), user: user.into(), order_id: order_id.into() })
            }
            ["paid", sale, order_id] => {
                console.paid.insert((sale.into(), order_id.into()));
            }
            ["cancelled", sale, order_id] => {
                console.cancelled.insert((sale.into(), order_id.into()));
            }
            ["admitted", sale, user, _place] => {
                console.admitted.insert((sale.into(), user.into()));
            }
            ["entered", drop, user] => console.entered.push((drop.into(), user.into())),
            _ => console.other.push(line.to_string()),
        }
    }
    Ok(console)
}

/// Postgres's orders of `sales`: (sale, user) → (order id, status).
pub fn postgres_orders(load: &Load, sales: &[&str]) -> anyhow::Result<HashMap<(String, String), (String, String)>> {
    let list: Vec<String> = sales.iter().map(|s| format!("'{s}'")).collect();
    let sql = format!("select sale_id, user_id, order_id, status from orders where sale_id in ({})", list.join(", "));
    let rows = psql(&load.services, &sql)?;
    Ok(rows
        .lines()
        .filter_map(|row| match row.split('|').collect::<Vec<_>>()[..] {
            [sale, user, id, status] => {
                Some(((sale.to_string(), user.to_string()), (id.to_string(), status.to_string())))
            }
            _ => None,
        })
        .collect())
}

/// The buyer's order as `GET /sales/{sale}/order` tells it: (status, order id).
fn order_route(app: &App, order: &Created, secret: Option<&SecretString>) -> anyhow::Result<(String, String)> {
    let answer = match secret {
        Some(secret) => {
            let user = UserId::parse(&order.user).map_err(anyhow::Error::msg)?;
            let token = seckill::identity::sign_hs256(secret, &user, "sub", Duration::from_secs(600), None, None)
                .map_err(anyhow::Error::msg)?;
            let bearer = format!("Bearer {token}");
            http::request(
                app.port,
                "GET",
                &format!("/sales/{}/order", order.sale),
                &[("Authorization", &bearer)],
                None,
            )?
        }
        None => {
            http::request(app.port, "GET", &format!("/sales/{}/order?user_id={}", order.sale, order.user), &[], None)?
        }
    };
    let body = answer.json();
    let text = |k: &str| body[k].as_str().unwrap_or("").to_string();
    Ok(if answer.status == 200 {
        (text("status"), text("order_id"))
    } else {
        (format!("HTTP {}", answer.status), text("error"))
    })
}

/// Checks the console's 201s (`expected` of them by the run's own count) in Postgres (all) and
/// through `app`'s order route (at most `most`, a random sample beyond): each with its id and the
/// status `windowed` and the console's payments and cancels give it ([`Console::fate`]); one
/// invariant line. `app` must not rate-limit 127.0.0.1 (the checks all come from there).
#[allow(clippy::too_many_arguments)]
pub fn verify(
    load: &mut Load,
    name: &str,
    console: &Console,
    windowed: bool,
    expected: i64,
    app: &App,
    secret: Option<&SecretString>,
    most: usize,
) -> anyhow::Result<()> {
    let created = &console.created;
    let mut sales: Vec<&str> = created.iter().map(|c| c.sale.as_str()).collect();
    sales.sort_unstable();
    sales.dedup();
    let stored = if sales.is_empty() { HashMap::new() } else { postgres_orders(load, &sales)? };
    let mut problems = vec![];
    let in_postgres = created
        .iter()
        .filter(|c| {
            let found = stored.get(&(c.sale.clone(), c.user.clone()));
            let fate = console.fate(c, windowed);
            let ok = found.is_some_and(|(id, status)| *id == c.order_id && status == fate);
            if !ok && problems.len() < 5 {
                problems.push(format!("{}/{} {} ({fate}): Postgres has {found:?}", c.sale, c.user, c.order_id));
            }
            ok
        })
        .count();
    let mut sample = created.to_vec();
    if sample.len() > most {
        fastrand::shuffle(&mut sample);
        sample.truncate(most);
    }
    let mut as_expected = 0;
    for order in &sample {
        let (status, id) = order_route(app, order, secret)?;
        let fate = console.fate(order, windowed);
        if status == fate && id == order.order_id {
            as_expected += 1;
        } else if problems.len() < 10 {
            problems.push(format!(
                "{}/{} {} ({fate}): the order route says {status} {id}",
                order.sale, order.user, order.order_id
            ));
        }
    }
    let v = |ok: bool| if ok { "ok" } else { "BROKEN" };
    let (n, checked) = (created.len(), sample.len());
    let ok = [n as i64 == expected, in_postgres == n, as_expected == checked];
    let fates = if windowed { "paid/cancelled as printed, else expired" } else { "confirmed" };
    println!(
        "invariant {name}: order ids printed {n} = 201s {expected} [{}], in Postgres with that sale, user, id and status ({fates}) {in_postgres}/{n} [{}], GET /sales/{{id}}/order with that status and id {as_expected}/{checked}{} [{}]",
        v(ok[0]),
        v(ok[1]),
        if checked < n { " (a random sample)" } else { "" },
        v(ok[2]),
    );
    for problem in &problems {
        load.log(&format!("{name}: {problem}"));
    }
    load.failures += ok.iter().filter(|ok| !**ok).count() as u32;
    Ok(())
}
