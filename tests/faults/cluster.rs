//! Redis Cluster failover-style fault: the master that holds a sale's keys is stopped mid-storm
//! and started again from its append-only file. The local cluster has no replicas, so while the
//! master is down the cluster refuses every command (full slot coverage is required); the service
//! answers 503 meanwhile, then recovers by itself, and loses nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use testbed::Redis;
use tokio::time::Instant;

use crate::common;
use crate::harness::Deployment;
use crate::storm_client::Storm;

/// Whether `node` serves `key` itself (a plain connection gets MOVED elsewhere).
fn owns(node: &Redis, key: &str) -> bool {
    node.query::<i64>(redis::cmd("EXISTS").arg(key)).is_ok()
}

fn cluster_ok(node: &Redis) -> bool {
    node.query::<String>(redis::cmd("CLUSTER").arg("INFO")).is_ok_and(|info| info.contains("cluster_state:ok"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_the_master_of_a_sale_mid_storm_is_survived_and_loses_nothing() {
    let cluster = common::cluster();
    let mut deployment = Deployment::on_redis(&cluster.url(), &[]).await;
    let (service, sale) = deployment.start_with_sale(10_000).await;
    let stock_key = deployment.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&sale).unwrap()).stock;
    let nodes = cluster.nodes();
    let master = nodes.iter().find(|n| owns(n, &stock_key)).expect("a master holds the sale");

    // One user per request, paced by the storm's concurrency; the restart lands in the middle.
    let (storm, running) = Storm::new(&deployment.address, &sale, 8_000, 8_000).spawn();
    storm.wait_for_created(500).await;
    let stopped = Instant::now();
    // SIGTERM (Redis writes its append-only file and exits); restarted as itself (same port,
    // nodes.conf and AOF).
    assert!(master.stop(), "redis on {} did not stop", master.port);
    tokio::time::sleep(Duration::from_secs(1)).await;
    master.start().expect("restarting the master");
    let until = Instant::now() + Duration::from_secs(30);
    while !nodes.iter().all(cluster_ok) {
        assert!(Instant::now() < until, "the cluster did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recovered_after = stopped.elapsed();
    let report = running.await.unwrap();

    // While the master was down: 503, never 500; after it, purchases go on in the same process.
    let unexpected: Vec<_> = report.statuses.keys().filter(|s| ![201, 409, 410, 503].contains(*s)).collect();
    assert!(unexpected.is_empty(), "{:?}; 5xx bodies {:?}", report.statuses, report.server_error_bodies);
    assert!(report.interrupted.is_empty() && report.refused == 0, "every request answered: {report:?}");
    assert!(report.count(503) > 0, "the restart must land inside the storm: {:?}", report.statuses);
    let after = deployment.buy(&sale, "after-the-restart").await;
    assert_eq!(after.status(), 201, "purchases go on after the restart");
    let mut confirmed = report.confirmed.clone();
    let after: serde_json::Value = after.json().await.unwrap();
    confirmed.insert(after["order_id"].as_str().unwrap().parse().unwrap());

    let status = deployment.wait_for_drain_within(&sale, Duration::from_secs(30)).await;
    assert_eq!(status.stock_initial, status.stock_left + status.sold, "{status:?}");
    // Every 201 is in Postgres; an order beyond them belongs to a request answered 503 (Redis ran
    // the script but the answer was lost with the node), never to anyone else.
    let stored: Vec<(uuid::Uuid, String)> = sqlx::query_as("select order_id, user_id from orders where sale_id = $1")
        .bind(&sale)
        .fetch_all(&deployment.pool)
        .await
        .unwrap();
    let stored_ids: BTreeSet<uuid::Uuid> = stored.iter().map(|(id, _)| *id).collect();
    assert!(confirmed.is_subset(&stored_ids), "a confirmed order is missing from Postgres");
    let unexplained: Vec<_> = stored
        .iter()
        .filter(|(id, user)| !confirmed.contains(id) && !report.server_error_users.contains(user))
        .collect();
    assert!(unexplained.is_empty(), "orders no client was told about: {unexplained:?}");
    assert_eq!(stored.len() as i64, status.sold, "Redis buyers and Postgres orders agree");
    drop(service);
    eprintln!(
        "figures cluster restart: sent={} 201={} 503={} recovered_after_ms={} orders={}",
        report.sent,
        report.count(201),
        report.count(503),
        recovered_after.as_millis(),
        stored.len()
    );
}

/// `/readyz` while one master of the cluster is down: 200 `degraded`, `redis: partial` (every pod
/// reaches what every other reaches: taking them all out of service sells nothing more), then `ok`
/// once it is back; with the cluster requiring full coverage (its state turns `fail`) and without
/// (the state stays `ok`, a slot range fails). It answered `ok` throughout: redis-rs's PING of
/// every master skips a master whose connection it has lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_master_down_leaves_the_service_ready_and_says_so() {
    let cluster = common::cluster();
    let mut deployment = Deployment::on_redis(&cluster.url(), &[]).await;
    let service = deployment.start().await;
    let readyz = async || {
        let response = deployment.client.get(deployment.url("/readyz")).send().await.unwrap();
        (response.status().as_u16(), response.json::<serde_json::Value>().await.unwrap())
    };
    let nodes = cluster.nodes();
    let master = nodes.last().expect("a master");
    // Whatever happens below, the cluster is left as the other tests expect it: every node up,
    // full coverage required.
    let _restore = Restore(nodes);
    for required in ["yes", "no"] {
        coverage(nodes, required).expect("CONFIG SET");
        assert_eq!(readyz().await.1["status"], "ok", "full coverage required: {required}");
        assert!(master.stop(), "redis on {} did not stop", master.port);
        let until = Instant::now() + Duration::from_secs(30);
        let (code, body) = loop {
            let (code, body) = readyz().await;
            if body["status"] != "ok" || Instant::now() >= until {
                break (code, body);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        master.start().expect("restarting the master");
        coverage(nodes, "yes").expect("CONFIG SET"); // the restarted master has its file's setting
        assert_eq!(
            (code, &body["status"], &body["redis"]),
            (200, &"degraded".into(), &"partial".into()),
            "full coverage required: {required}: {body}"
        );
        assert!(body["message"].as_str().unwrap().contains("redis cluster master"), "{body}");
        let until = Instant::now() + Duration::from_secs(30);
        while !nodes.iter().all(cluster_ok) || readyz().await.1["status"] != "ok" {
            assert!(Instant::now() < until, "readiness did not come back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    drop(service);
}

/// Sets `cluster-require-full-coverage` on every node.
fn coverage(nodes: &[Redis], required: &str) -> anyhow::Result<()> {
    for node in nodes {
        let set = redis::cmd("CONFIG").arg("SET").arg("cluster-require-full-coverage").arg(required).clone();
        node.query::<String>(&set)?;
    }
    Ok(())
}

/// On drop: starts every node that is down and requires full coverage again, best effort.
struct Restore<'a>(&'a [Redis]);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        for node in self.0 {
            if !node.is_up() {
                let _ = node.start();
            }
        }
        let _ = coverage(self.0, "yes");
    }
}
