//! Dependency outages: Postgres stopped mid-sale, Redis scripts flushed and Redis restarted, Redis
//! stalled mid-storm.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use uuid::Uuid;

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

    let failed_before_the_outage = service.log_lines("worker step failed");
    let outage = PostgresOutage::begin();
    let started = Instant::now();
    let during = Storm::new(&deployment.address, &sale, 150, 300).users_named("during").run().await;
    assert_eq!(during.count(201), 150, "buys keep succeeding without Postgres: {:?}", during.statuses);
    // Still ready (every pod would otherwise leave the service together while they all sell).
    let (code, body) = readyz(&deployment).await;
    assert_eq!((code, &body["status"]), (200, &serde_json::json!("degraded")), "{body}");
    assert_eq!(body["postgres"], "down", "{body}");
    assert_eq!(body["redis"], "ok", "{body}");
    let status = deployment.status(&sale).await;
    assert_eq!((status.sold, status.persisted), (250, None), "status still answers, without the Postgres count");
    // A sale Redis does not know is retired or made up, as only Postgres can say: without it,
    // 503 (nothing bought), not 404 `unknown_sale` (which a retired sale's buyers would believe).
    let unknown = crate::common::new_sale_id();
    let refused = deployment.buy(&unknown, "nobody").await;
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "unavailable", "{body}");
    // A quiet stretch of the outage: a worker in a hot loop would burn a core and flood the log.
    let cpu_before = service.cpu_time();
    let failures_before = service.log_lines("worker step failed");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let cpu = service.cpu_time() - cpu_before;
    let failures = service.log_lines("worker step failed") - failures_before;
    let noticed = service.log_lines("worker step failed") - failed_before_the_outage;
    let outage_ms = started.elapsed().as_millis();
    outage.end();

    let until = Instant::now() + Duration::from_secs(15);
    while readyz(&deployment).await.1["status"] != "ok" {
        assert!(Instant::now() < until, "Postgres answers again once it is back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let answer = deployment.buy(&unknown, "nobody").await.status();
        if answer == 404 {
            break;
        }
        assert_eq!(answer, 503, "the made-up sale after the outage");
        assert!(Instant::now() < until, "the made-up sale is still 503 after the outage");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain = Instant::now();
    report.merge(during);
    deployment.wait_for_drain_within(&sale, Duration::from_secs(30)).await;
    let drain_ms = drain.elapsed().as_millis();
    let status = deployment.assert_invariants(&sale, &report.confirmed).await;
    assert_eq!(status.persisted, Some(250));
    // Over the whole outage (its backoff may leave the quiet 4 s without a step).
    assert!(noticed >= 1, "the worker noticed the outage");
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
    // A purchase on a connection Redis has closed fails as a dropped connection, which cannot
    // tell a call never sent from one sent and lost: `outcome_unknown`. Once the connection is
    // known down, Redis refuses the new one: `unavailable`.
    let mut codes = vec![];
    for i in 0..5 {
        let response = deployment.buy(&sale, &format!("while-down-{i}")).await;
        assert_eq!(response.status(), 503);
        let body: Value = response.json().await.unwrap();
        codes.push(body["error"].as_str().unwrap_or_default().to_owned());
    }
    assert!(codes.iter().all(|c| c == "unavailable" || c == "outcome_unknown"), "{codes:?}");
    assert_eq!(codes.last().map(String::as_str), Some("unavailable"), "{codes:?}");
    let (code, body) = readyz(&deployment).await;
    assert_eq!((code, body["redis"].as_str()), (503, Some("down")), "{body}");
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(started.elapsed())).await;
    let cpu = service.cpu_time() - cpu_before;
    let failures = service.log_lines("worker step failed") - failures_before;
    outage.end();
    // The test's own connection reconnects on first use after the restart.
    let until = Instant::now() + Duration::from_secs(10);
    while deployment.store.keyspace().reach().await.is_err() {
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

/// A script that keeps Redis busy for 2.5 s (its own clock), as a long `EVAL` does.
const STALL: &str = "local t = redis.call('TIME') local start = t[1] * 1000000 + t[2] \
    repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= 2500000 return 1";

/// Redis stalls 2.5 s (one long script) in the middle of a storm of distinct buyers: the
/// purchases on Redis time out in the app (`SECKILL_REDIS_TIMEOUT`, 1 s), and Redis runs them
/// once the stall ends. A buyer told 503 `unavailable` has no order; one told 503
/// `outcome_unknown` has none, or exactly the one its answer named; and a retry says which: 409
/// `already_purchased` with that order id, or a purchase anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stall_mid_storm_tells_each_503_buyer_whether_it_bought() {
    const BUYERS: usize = 4_000;
    let mut deployment = Deployment::new(&[]).await;
    let (_service, sale) = deployment.start_with_sale(BUYERS as i64).await;
    let (storm, running) = Storm::new(&deployment.address, &sale, BUYERS, BUYERS).users_named("stall").spawn();
    storm.wait_for_created(200).await;
    let stall = tokio::task::spawn_blocking(|| {
        let started = std::time::Instant::now();
        let _: i64 = redis::cmd("EVAL").arg(STALL).arg(0).query(&mut *crate::common::sync_connection()).unwrap();
        started.elapsed()
    });
    let mut report = running.await.unwrap();
    let stalled = stall.await.unwrap();
    assert!(report.interrupted.is_empty() && report.refused == 0, "{report:?}");
    let unexpected: Vec<_> = report.statuses.keys().filter(|s| ![201, 503].contains(*s)).collect();
    assert!(unexpected.is_empty(), "{:?}", report.statuses);
    deployment.wait_for_drain(&sale).await;
    let orders: BTreeMap<String, Uuid> = sqlx::query_as("select user_id, order_id from orders where sale_id = $1")
        .bind(&sale)
        .fetch_all(&deployment.pool)
        .await
        .unwrap()
        .into_iter()
        .collect();

    let (mut unavailable, mut unknown) = (vec![], vec![]);
    for (user, body) in &report.server_error_answers {
        let body: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        match body["error"].as_str() {
            Some("unavailable") => unavailable.push(user.clone()),
            Some("outcome_unknown") => {
                assert_eq!(body["sale_id"], sale.as_str(), "{body}");
                let order_id: Uuid = body["order_id"].as_str().and_then(|id| id.parse().ok()).expect("an order id");
                unknown.push((user.clone(), order_id));
            }
            _ => panic!("another 5xx than unavailable or outcome_unknown: {body}"),
        }
    }
    assert!(report.count(503) > 0, "the stall must land inside the storm: {:?}", report.statuses);
    let told_unavailable_but_bought: Vec<_> = unavailable.iter().filter(|user| orders.contains_key(*user)).collect();
    assert!(
        told_unavailable_but_bought.is_empty(),
        "{} of the {} buyers told 503 unavailable (nothing bought) have an order: {told_unavailable_but_bought:?}",
        told_unavailable_but_bought.len(),
        unavailable.len()
    );
    for (user, order_id) in &unknown {
        if let Some(stored) = orders.get(user) {
            assert_eq!(stored, order_id, "{user} was told outcome_unknown with another order id than it bought");
        }
    }

    // Each retries: 409 with its order if it has one, else a purchase anew.
    let (mut receipts, mut bought_anew) = (0, 0);
    for user in unavailable.iter().chain(unknown.iter().map(|(user, _)| user)) {
        let response = deployment.buy(&sale, user).await;
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        let order_id: Uuid = body["order_id"].as_str().and_then(|id| id.parse().ok()).expect("an order id");
        match orders.get(user) {
            Some(stored) => {
                assert_eq!((status, order_id), (409, *stored), "{user}'s retry: {body}");
                receipts += 1;
            }
            None => {
                assert_eq!(status, 201, "{user} has no order, its retry buys: {body}");
                report.confirmed.insert(order_id);
                bought_anew += 1;
            }
        }
    }
    let status = deployment.assert_invariants(&sale, &report.confirmed).await;
    assert_eq!(status.sold as usize, orders.len() + bought_anew);
    eprintln!(
        "figures redis-stall: sent={} 201={} stall_ms={} unavailable={} outcome_unknown={} of_which_bought={} retries_409={receipts} retries_201={bought_anew} sold={}",
        report.sent,
        report.count(201),
        stalled.as_millis(),
        unavailable.len(),
        unknown.len(),
        unknown.iter().filter(|(user, _)| orders.contains_key(user)).count(),
        status.sold
    );
}
