//! Several `seckill serve` processes on one Redis (a server or a 3-master cluster) and one
//! Postgres behave as one service: one storm spread over them sells exactly the stock; sold-out
//! flags, re-seeds, the consumer group and reclaiming all work across processes.

use std::time::Duration;

use futures::future::join_all;
use redis::AsyncCommands;
use redis::streams::StreamPendingCountReply;
use tokio::time::Instant;

use crate::common;
use crate::harness::Deployment;
use crate::storm_client::{Storm, StormReport};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_redis_server_behave_as_one_service() {
    three_instances_behave_as_one_service(&common::redis_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_a_redis_cluster_behave_as_one_service() {
    three_instances_behave_as_one_service(&common::cluster().url()).await;
}

async fn three_instances_behave_as_one_service(redis_url: &str) {
    // Sold-out flags that never lapse in the test: only events clear them (below).
    let mut deployment = Deployment::on_redis(redis_url, &[("SECKILL_SOLD_OUT_FLAG_TTL", "1h")]).await;
    let first = deployment.start().await;
    let others = [deployment.start_instance(&[]).await, deployment.start_instance(&[]).await];
    let addresses: Vec<String> = [&first].into_iter().chain(&others).map(|p| p.address.clone()).collect();
    let sale = common::new_sale_id();
    deployment.seed_stock(&sale, 300).await;

    let report = storm_over(&deployment, &addresses, &sale, 300).await;

    // Every worker read the sale's stream through the one consumer group.
    let (stream, group) = deployment.orders_stream(&sale);
    let consumers: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(&stream)
        .arg(group)
        .query_async(&mut deployment.redis.clone())
        .await
        .unwrap();
    assert_eq!(consumers.len(), 3, "three consumers in the group");

    // Sold out everywhere: 410 to a newcomer, 409 to a buyer, through every instance.
    let buyer = deployment.buyers(&sale).await.into_iter().next().unwrap();
    for address in &addresses {
        assert_eq!(buy(&deployment, address, &sale, "newcomer").await, 410, "{address}");
        assert_eq!(buy(&deployment, address, &sale, &buyer).await, 409, "{address}");
    }

    // A re-seed through one instance clears the others' sold-out flags by its event.
    let empty = common::new_sale_id();
    deployment.seed_stock(&empty, 0).await;
    for address in &addresses {
        assert_eq!(buy(&deployment, address, &empty, "early").await, 410, "flag set on {address}");
    }
    deployment.seed_stock(&empty, 3).await;
    let reseeded = Instant::now();
    for (i, address) in addresses.iter().enumerate().skip(1) {
        loop {
            let status = buy(&deployment, address, &empty, &format!("late-{i}")).await;
            if status == 201 {
                break;
            }
            assert_eq!(status, 410);
            assert!(reseeded.elapsed() < Duration::from_secs(20), "{address} kept its flag: no seed event");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    eprintln!(
        "figures instances ({}): 201={} of {} answers over 3 processes; flags cleared {} ms after the re-seed",
        if redis_url.contains(',') { "cluster" } else { "single" },
        report.count(201),
        report.sent,
        reseeded.elapsed().as_millis()
    );
    deployment.wait_for_drain(&empty).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_a_redis_cluster_sell_a_sharded_sale_as_one_service() {
    let mut deployment = Deployment::on_redis(&common::cluster().url(), &[]).await;
    let first = deployment.start().await;
    let others = [deployment.start_instance(&[]).await, deployment.start_instance(&[]).await];
    let addresses: Vec<String> = [&first].into_iter().chain(&others).map(|p| p.address.clone()).collect();
    let sale = common::new_sale_id();
    let seeded = deployment.seed(&sale, serde_json::json!({"stock": 300, "shards": 3})).await;
    assert_eq!(seeded.status(), 200, "{}", seeded.text().await.unwrap());

    // Each process learns the layout by itself (its first purchase is answered `wrong_shards`).
    let report = storm_over(&deployment, &addresses, &sale, 300).await;
    assert_eq!(deployment.status(&sale).await.shards, 3);
    // Sold out in every shard: 410 to a newcomer, 409 to a buyer of any shard, everywhere.
    let buyers = deployment.buyers(&sale).await;
    for (address, buyer) in addresses.iter().zip(buyers.iter().step_by(97)) {
        assert_eq!(buy(&deployment, address, &sale, "newcomer").await, 410, "{address}");
        assert_eq!(buy(&deployment, address, &sale, buyer).await, 409, "{address}");
    }
    eprintln!(
        "figures instances (cluster, 3 shards): 201={} of {} answers over 3 processes",
        report.count(201),
        report.sent
    );
}

/// One storm spread over the instances at `addresses`: the same 3,000 users try through every
/// one of them. Exactly `stock` are sold, with no 5xx, and the promises hold.
async fn storm_over(deployment: &Deployment, addresses: &[String], sale: &str, stock: i64) -> StormReport {
    let storms: Vec<Storm> = addresses.iter().map(|address| Storm::new(address, sale, 3_000, 4_000)).collect();
    let mut report = StormReport::default();
    for part in join_all(storms.iter().map(Storm::run)).await {
        report.merge(part);
    }
    assert!(report.interrupted.is_empty() && report.refused == 0, "every request answered: {report:?}");
    assert_eq!(report.server_errors(), 0, "no 5xx: {:?}", report.server_error_bodies);
    assert!(report.unexpected_statuses().is_empty(), "{:?}", report.statuses);
    assert_eq!(report.count(201), stock as usize, "exactly the stock, across instances: {:?}", report.statuses);
    let status = deployment.assert_invariants(sale, &report.confirmed).await;
    assert_eq!((status.stock_left, status.sold), (0, stock));
    assert_eq!(deployment.order_ids(sale).await, report.confirmed, "Postgres holds exactly the confirmed orders");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_a_killed_instance_held_are_claimed_by_a_surviving_one() {
    let mut deployment = Deployment::new(&[("SECKILL_WORKER_CLAIM_TIMEOUT", "1s")]).await;
    // The first process only serves requests; two others run the workers, under known names.
    let _api = deployment.start_with(&[("SECKILL_NO_WORKER", "true")]).await;
    let named = |name: &str| {
        let database_url = format!("{}?application_name={name}", deployment.database_url);
        [("SECKILL_WORKER_CONSUMER".to_owned(), name.to_owned()), ("SECKILL_DATABASE_URL".to_owned(), database_url)]
    };
    let (left, right) = (named("worker-left"), named("worker-right"));
    let mut workers =
        [deployment.start_instance(&as_env(&left)).await, deployment.start_instance(&as_env(&right)).await];
    let sale = common::new_sale_id();
    deployment.seed_stock(&sale, 100).await;

    // Hold the orders table: whatever a worker reads stays pending with it.
    let mut blocker: sqlx::PgConnection = sqlx::Connection::connect(&deployment.database_url).await.unwrap();
    let mut lock = sqlx::Connection::begin(&mut blocker).await.unwrap();
    sqlx::query("lock table orders in exclusive mode").execute(&mut *lock).await.unwrap();
    let report = Storm::new(&deployment.address, &sale, 60, 60).run().await;
    assert_eq!(report.count(201), 60);

    let (stream, group) = deployment.orders_stream(&sale);
    let until = Instant::now() + Duration::from_secs(15);
    let victim = loop {
        let pending: StreamPendingCountReply =
            deployment.redis.clone().xpending_count(&stream, group, "-", "+", 1000).await.unwrap();
        if let Some(entry) = pending.ids.first() {
            break entry.consumer.clone();
        }
        assert!(Instant::now() < until, "no worker took the orders");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (victim_index, survivor_index) = if victim == "worker-left" { (0, 1) } else { (1, 0) };
    workers[victim_index].kill().await;
    // Its blocked insert dies with it, as in a real crash, instead of committing later.
    sqlx::query("select pg_terminate_backend(pid) from pg_stat_activity where application_name = $1")
        .bind(&victim)
        .execute(&mut *lock)
        .await
        .unwrap();
    lock.rollback().await.unwrap();

    let status = deployment.wait_for_drain_within(&sale, Duration::from_secs(30)).await;
    assert_eq!((status.sold, status.persisted), (60, Some(60)));
    assert_eq!(deployment.order_ids(&sale).await, report.confirmed, "every order persisted once");
    let survivor = &workers[survivor_index];
    assert!(survivor.log_lines("claimed orders left pending by another consumer") > 0, "the survivor reclaimed");
}

fn as_env(vars: &[(String, String)]) -> Vec<(&str, &str)> {
    vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The status of one purchase through the instance at `address`.
async fn buy(deployment: &Deployment, address: &str, sale: &str, user: &str) -> u16 {
    let body = serde_json::json!({"sale_id": sale, "user_id": user});
    deployment.client.post(format!("{address}/buy")).json(&body).send().await.unwrap().status().as_u16()
}
