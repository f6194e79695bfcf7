//! Dependency outages: Postgres stopped mid-sale, Redis scripts flushed and Redis restarted.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::common::assert_error;
use crate::harness::{Deployment, PostgresOutage, RedisOutage};
use crate::storm_client::{Storm, StormReport};

async fn readyz(deployment: &Deployment) -> (u16, Value) {
    let response = deployment.client.get(deployment.url("/readyz")).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_postgres_is_down_buys_succeed_the_worker_backs_off_and_everything_drains_after() {
    let mut deployment = Deployment::new(&[]).await;
    let (service, sale) = deployment.start_with_sale(300).await;
    let mut report = Storm::new(&deployment.address, &sale, 100, 100).users_named("before").run().await;
    deployment.wait_for_drain(&sale).await;

    let outage = PostgresOutage::begin();
    let started = Instant::now();
    let during = Storm::new(&deployment.address, &sale, 150, 300).users_named("during").run().await;
    assert_eq!(during.count(201), 150, "buys keep succeeding without Postgres: {:?}", during.statuses);
    let (code, body) = readyz(&deployment).await;
    assert_eq!(code, 503);
    assert_eq!(body["postgres"], "down", "{body}");
    assert_eq!(body["redis"], "ok", "{body}");
    let status = deployment.status(&sale).await;
    assert_eq!((status.sold, status.persisted), (250, None), "status still answers, without the Postgres count");
    // A quiet stretch of the outage: a worker in a hot loop would burn a core and flood the log.
    let cpu_before = service.cpu_time();
    let failures_before = service.log_lines("worker step failed");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let cpu = service.cpu_time() - cpu_before;
    let failures = service.log_lines("worker step failed") - failures_before;
    let outage_ms = started.elapsed().as_millis();
    outage.end();

    assert_eq!(readyz(&deployment).await.0, 200, "ready again once Postgres is back");
    let drain = Instant::now();
    report.merge(during);
    deployment.wait_for_drain_within(&sale, Duration::from_secs(30)).await;
    let drain_ms = drain.elapsed().as_millis();
    let status = deployment.assert_invariants(&sale, &report.confirmed).await;
    assert_eq!(status.persisted, Some(250));
    assert!(failures >= 1, "the worker noticed the outage");
    assert!(failures <= 6, "{failures} failed steps logged in 4 s: the worker does not back off");
    assert!(cpu < Duration::from_millis(800), "{cpu:?} of CPU in 4 s of outage: a hot loop");
    eprintln!(
        "figures postgres-outage: sent={} confirmed={} outage_ms={outage_ms} failed_steps_in_4s={failures} cpu_in_4s_ms={} expected_orders=250 found_orders={} drain_after_restart_ms={drain_ms}",
        report.sent,
        report.confirmed.len(),
        cpu.as_millis(),
        status.persisted.unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flushes_and_a_redis_restart_are_survived_without_a_500() {
    let mut deployment = Deployment::new(&[]).await;
    let (service, sale) = deployment.start_with_sale(2_000).await;

    // SCRIPT FLUSH three times during a storm: every call reloads its script (NOSCRIPT).
    let (storm, running) = Storm::new(&deployment.address, &sale, 1_000, 3_000).users_named("flush").spawn();
    for created in [50, 150, 250] {
        storm.wait_for_created(created).await;
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut deployment.redis.clone()).await.unwrap();
    }
    let mut report: StormReport = running.await.unwrap();
    assert!(report.interrupted.is_empty() && report.refused == 0, "{report:?}");
    assert_eq!(report.server_errors(), 0, "no 5xx across script flushes: {:?}", report.server_error_bodies);
    assert!(report.unexpected_statuses().is_empty(), "{:?}", report.statuses);
    let sold_before_restart = deployment.wait_for_drain(&sale).await.sold;

    let outage = RedisOutage::begin();
    let cpu_before = service.cpu_time();
    let failures_before = service.log_lines("worker step failed");
    let started = Instant::now();
    for i in 0..5 {
        let response = deployment.buy(&sale, &format!("while-down-{i}")).await;
        assert_error(response, 503, "unavailable").await;
    }
    let (code, body) = readyz(&deployment).await;
    assert_eq!((code, body["redis"].as_str()), (503, Some("down")), "{body}");
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(started.elapsed())).await;
    let cpu = service.cpu_time() - cpu_before;
    let failures = service.log_lines("worker step failed") - failures_before;
    outage.end();
    // The test's own connection reconnects on first use after the restart.
    let until = Instant::now() + Duration::from_secs(10);
    while deployment.store.keyspace().ping().await.is_err() {
        assert!(Instant::now() < until, "the test's Redis connection did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The shared connection reconnects by itself; no process restart.
    let until = Instant::now() + Duration::from_secs(15);
    let first_after = loop {
        let response = deployment.buy(&sale, "first-after-restart").await;
        if response.status() != 503 {
            break response;
        }
        assert!(Instant::now() < until, "the service did not recover after Redis came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(first_after.status(), 201);
    let body: Value = first_after.json().await.unwrap();
    report.confirmed.insert(body["order_id"].as_str().unwrap().parse().unwrap());
    let after = Storm::new(&deployment.address, &sale, 500, 1_000).users_named("after").run().await;
    assert_eq!(after.server_errors(), 0, "no 5xx after the restart: {:?}", after.server_error_bodies);
    report.merge(after);

    let status = deployment.assert_invariants(&sale, &report.confirmed).await;
    assert!(status.sold > sold_before_restart, "sales went on after the restart");
    assert_eq!(status.sold as usize, report.confirmed.len(), "every sale was answered 201");
    // Redis refuses connections at once, so only the worker's backoff keeps it from spinning.
    assert!(failures >= 1, "the worker noticed the outage");
    assert!(failures <= 8, "{failures} failed steps logged in 6 s: the worker does not back off");
    assert!(cpu < Duration::from_millis(600), "{cpu:?} of CPU in 6 s of outage: a hot loop");
    eprintln!(
        "figures redis-restart: sent={} confirmed={} sold_before_restart={sold_before_restart} failed_steps_in_6s={failures} cpu_in_6s_ms={} expected_orders={} found_orders={}",
        report.sent + 6,
        report.confirmed.len(),
        cpu.as_millis(),
        status.sold,
        status.persisted.unwrap_or_default()
    );
}
