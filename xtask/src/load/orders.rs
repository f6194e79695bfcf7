//! Every order a k6 run saw created, checked once the queues drained: the script prints each 201
//! as `order SALE USER ORDER_ID` to its console (a file, `--console-output`); each must be in
//! Postgres with that id, and `GET /sales/{id}/order` must answer `confirmed` with that id.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use seckill::domain::UserId;
use secrecy::SecretString;
use testbed::App;

use super::Load;
use crate::bench::driver::psql;
use crate::bench::http;

/// One 201 as the generator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub sale: String,
    pub user: String,
    pub order_id: String,
}

/// The `order SALE USER ORDER_ID` lines of a console file, and its other lines (k6's warnings).
pub fn read(path: &Path) -> anyhow::Result<(Vec<Created>, Vec<String>)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut created, mut other) = (vec![], vec![]);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match line.split(' ').collect::<Vec<_>>()[..] {
            ["order", sale, user, order_id] => {
                created.push(Created { sale: sale.into(), user: user.into(), order_id: order_id.into() })
            }
            _ => other.push(line.to_string()),
        }
    }
    Ok((created, other))
}

/// Postgres's orders of `sales`: (sale, user) → order id.
fn postgres_orders(load: &Load, sales: &[&str]) -> anyhow::Result<HashMap<(String, String), String>> {
    let list: Vec<String> = sales.iter().map(|s| format!("'{s}'")).collect();
    let sql = format!("select sale_id, user_id, order_id from orders where sale_id in ({})", list.join(", "));
    let rows = psql(&load.services, &sql)?;
    Ok(rows
        .lines()
        .filter_map(|row| match row.split('|').collect::<Vec<_>>()[..] {
            [sale, user, id] => Some(((sale.to_string(), user.to_string()), id.to_string())),
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

/// Checks `created` (the run's 201s, `expected` of them by its own count) in Postgres (all) and
/// through `app`'s order route (at most `most`, a random sample beyond); one invariant line.
/// `app` must not rate-limit 127.0.0.1 (the checks all come from there).
pub fn verify(
    load: &mut Load,
    name: &str,
    created: &[Created],
    expected: i64,
    app: &App,
    secret: Option<&SecretString>,
    most: usize,
) -> anyhow::Result<()> {
    let mut sales: Vec<&str> = created.iter().map(|c| c.sale.as_str()).collect();
    sales.sort_unstable();
    sales.dedup();
    let stored = if sales.is_empty() { HashMap::new() } else { postgres_orders(load, &sales)? };
    let mut problems = vec![];
    let in_postgres = created
        .iter()
        .filter(|c| {
            let found = stored.get(&(c.sale.clone(), c.user.clone()));
            let ok = found == Some(&c.order_id);
            if !ok && problems.len() < 5 {
                problems.push(format!("{}/{} {}: Postgres has {found:?}", c.sale, c.user, c.order_id));
            }
            ok
        })
        .count();
    let mut sample = created.to_vec();
    if sample.len() > most {
        fastrand::shuffle(&mut sample);
        sample.truncate(most);
    }
    let mut confirmed = 0;
    for order in &sample {
        let (status, id) = order_route(app, order, secret)?;
        if status == "confirmed" && id == order.order_id {
            confirmed += 1;
        } else if problems.len() < 10 {
            problems
                .push(format!("{}/{} {}: the order route says {status} {id}", order.sale, order.user, order.order_id));
        }
    }
    let v = |ok: bool| if ok { "ok" } else { "BROKEN" };
    let (n, checked) = (created.len(), sample.len());
    let ok = [n as i64 == expected, in_postgres == n, confirmed == checked];
    println!(
        "invariant {name}: order ids printed {n} = 201s {expected} [{}], in Postgres with that sale, user and id {in_postgres}/{n} [{}], GET /sales/{{id}}/order confirmed with that id {confirmed}/{checked}{} [{}]",
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
