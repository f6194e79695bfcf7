//! What the soak and retire-storm tests share: one small sale's whole life (seeded, sold out
//! through several instances, drained, retired), and readings of the deployment (its keys, its
//! registries, each process's streams and memory).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::join_all;
use redis::AsyncCommands;
use seckill::redis::keys::{sales_registry_key, shards_registry_key};
use serde_json::Value;
use tokio::time::Instant;
use uuid::Uuid;

use crate::common::{self, ADMIN_TOKEN};
use crate::harness::{Deployment, Seckill};

/// Buyers of each small sale; one more user tries and hears 410.
pub const STOCK: usize = 3;

/// The deployment's keys, limiter keys (and the janitor's lock) excepted.
pub fn deployment_keys(deployment: &Deployment) -> BTreeSet<String> {
    let prefix = &deployment.key_prefix;
    common::scan_keys(&format!("{prefix}:*"))
        .into_iter()
        .filter(|k| !k.contains(":ratelimit:") && !k.ends_with(":retire-lock"))
        .collect()
}

/// The sales registry and the shards registry.
pub async fn registries(deployment: &Deployment) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut redis = deployment.redis.clone();
    let sales = redis.smembers(sales_registry_key(&deployment.key_prefix)).await.unwrap();
    let shards = redis.smembers(shards_registry_key(&deployment.key_prefix)).await.unwrap();
    (sales, shards)
}

/// `seckill_worker_streams{state="ready"}` of the process at `address` (0 when absent).
pub async fn ready_streams(deployment: &Deployment, address: &str) -> i64 {
    let metrics = deployment.client.get(format!("{address}/metrics")).send().await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("seckill_worker_streams{state=\"ready\"} "))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Waits (up to 10 s) until every process's worker reads `expected` streams.
pub async fn wait_for_ready_streams(deployment: &Deployment, processes: &[&Seckill], expected: i64) {
    let until = Instant::now() + Duration::from_secs(10);
    for process in processes {
        loop {
            let ready = ready_streams(deployment, &process.address).await;
            if ready == expected {
                break;
            }
            assert!(Instant::now() < until, "{}: {ready} streams ready, expected {expected}", process.address);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Resident memory of the process, in KiB (`VmRSS` in /proc/<pid>/status).
pub fn rss_kib(process: &Seckill) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", process.pid())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One purchase through `address`: its status and, for a 201, its order id.
async fn buy(deployment: &Deployment, address: &str, sale: &str, user: &str) -> (u16, Option<Uuid>) {
    let body = serde_json::json!({"sale_id": sale, "user_id": user});
    let response = deployment.client.post(format!("{address}/buy")).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    let order = if status == 201 {
        let body: Value = response.json().await.unwrap();
        Some(body["order_id"].as_str().unwrap().parse().unwrap())
    } else {
        None
    };
    (status, order)
}

/// Seeds `sales` sales of [`STOCK`], sells each out through the instances in turn (plus one late
/// buyer answered 410), waits until every order is in Postgres, then retires them all at once,
/// each through another instance: the order ids the clients were given.
pub async fn sale_lives(deployment: &Deployment, addresses: &[String], sales: &[String]) -> BTreeSet<Uuid> {
    for sale in sales {
        deployment.seed_stock(sale, STOCK as i64).await;
    }
    let purchases = sales.iter().enumerate().flat_map(|(s, sale)| {
        (0..=STOCK).map(move |u| (addresses[(s + u) % addresses.len()].clone(), sale.clone(), format!("u{u}")))
    });
    let answers =
        join_all(purchases.map(|(address, sale, user)| async move { buy(deployment, &address, &sale, &user).await }))
            .await;
    let created: BTreeSet<Uuid> = answers.iter().filter_map(|(_, order)| *order).collect();
    assert_eq!(created.len(), sales.len() * STOCK, "{answers:?}");
    assert_eq!(answers.iter().filter(|(status, _)| *status == 410).count(), sales.len(), "{answers:?}");
    for sale in sales {
        deployment.wait_for_drain(sale).await;
    }
    let retirements = sales.iter().enumerate().map(|(i, sale)| {
        let url = format!("{}/admin/sales/{sale}", addresses[i % addresses.len()]);
        async move { deployment.client.delete(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap() }
    });
    for response in join_all(retirements).await {
        let status = response.status();
        assert_eq!(status, 200, "{}", response.text().await.unwrap());
    }
    created
}

/// Postgres holds each of `orders` exactly once, for the sales in `sales`, and nothing else of them.
pub async fn assert_orders_once(deployment: &Deployment, sales: &[String], orders: &BTreeSet<Uuid>) {
    let stored: Vec<Uuid> = sqlx::query_scalar("select order_id from orders where sale_id = any($1)")
        .bind(sales)
        .fetch_all(&deployment.pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), orders.len(), "one row per order");
    assert_eq!(stored.into_iter().collect::<BTreeSet<_>>(), *orders, "Postgres holds exactly the orders given");
}
