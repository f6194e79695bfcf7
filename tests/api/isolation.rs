//! One sale's broken or missing order stream never stalls the others (issue 16, break 1); dead
//! consumers are pruned; the worker's insert has a deadline.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::streams::{StreamReadOptions, StreamReadReply};
use seckill::domain::SaleId;
use seckill::orders::streams::StreamState;
use seckill::orders::worker::{StepOutcome, Worker, WorkerSettings};
use seckill::redis::keys::SaleKeys;
use serde_json::Value;

use crate::helpers::{ADMIN_TOKEN, TestApp, new_sale_id, spawn_app, spawn_app_with};

/// Two sales, `a` and `b`, seeded with stock 10 each.
async fn two_sales(app: &TestApp) -> (String, String) {
    let (a, b) = (new_sale_id(), new_sale_id());
    app.seed_stock(&a, 10).await;
    app.seed_stock(&b, 10).await;
    (a, b)
}

/// Deletes the sale's keys in Redis (an operator's clean-up, an eviction), the stream included
/// unless `keep_stream`.
async fn delete_keys(app: &TestApp, sale: &str, keep_stream: bool) {
    let keys = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(sale).unwrap());
    for key in keys.all() {
        if !(keep_stream && key == keys.orders) {
            let _: i64 = app.redis.clone().del(key).await.unwrap();
        }
    }
}

async fn readyz(app: &TestApp) -> Value {
    let response = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), 200, "a broken sale does not make the service unready");
    response.json().await.unwrap()
}

/// Polls `/readyz` (up to 20 s) until the worker reports `sale`'s stream in `state`; the report.
async fn wait_for_problem(app: &TestApp, sale: &str, state: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let body = readyz(app).await;
        let problems = body["worker"]["problems"].as_array().cloned().unwrap_or_default();
        if problems.iter().any(|p| p["sale"] == sale && p["state"] == state) {
            assert_eq!(body["worker"]["status"], "degraded", "{body}");
            return body;
        }
        assert!(Instant::now() < until, "{sale} never reported {state}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metrics(app: &TestApp) -> String {
    app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap()
}

async fn overview(app: &TestApp) -> Value {
    let response = app.client.get(app.url("/admin/sales")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 200, "one broken sale must not fail the list");
    response.json().await.unwrap()
}

#[tokio::test]
async fn a_sale_whose_keys_were_deleted_is_reported_lost_and_the_others_still_drain() {
    let app = spawn_app().await;
    let (a, b) = two_sales(&app).await;
    assert_eq!(app.buy(&a, "early").await.status(), 201);
    app.wait_for_drain(&a).await;

    delete_keys(&app, &a, false).await;
    assert_eq!(app.buy(&b, "later").await.status(), 201);

    let status = app.wait_for_drain_within(&b, Duration::from_secs(20)).await;
    assert_eq!(status.persisted, Some(1), "b's order landed");
    let body = wait_for_problem(&app, &a, "lost").await;
    assert_eq!((body["status"].as_str(), body["redis"].as_str()), (Some("ok"), Some("ok")));
    let (stream, _) = app.orders_stream(&a);
    let exists: bool = app.redis.clone().exists(&stream).await.unwrap();
    assert!(!exists, "the worker never resurrects a deleted stream");
    let exposition = metrics(&app).await;
    for line in [
        "seckill_worker_streams{state=\"lost\"} 1",
        "seckill_worker_streams{state=\"ready\"} 1",
        "seckill_worker_streams{state=\"unreadable\"} 0",
        "seckill_worker_streams{state=\"stream_missing\"} 0",
    ] {
        assert!(exposition.contains(line), "{line} in /metrics:\n{exposition}");
    }
    let overview = overview(&app).await;
    assert_eq!(overview["worker"]["problems"][0]["sale"], a.as_str(), "{overview}");
}

#[tokio::test]
async fn a_lost_sales_orders_left_in_its_stream_still_drain() {
    let app = spawn_app_with(|_| {}, false).await;
    let (a, b) = two_sales(&app).await;
    assert_eq!(app.buy(&a, "queued-in-a").await.status(), 201);
    assert_eq!(app.buy(&b, "queued-in-b").await.status(), 201);
    delete_keys(&app, &a, true).await;

    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    for _ in 0..10 {
        if worker.step().await.unwrap() == StepOutcome::Idle {
            break;
        }
    }

    assert_eq!(app.order_ids(&a).await.len(), 1, "the lost sale's queued order drained");
    assert_eq!(app.order_ids(&b).await.len(), 1);
    let report = worker.health().report();
    assert_eq!(report.status, "degraded");
    assert_eq!((report.problems[0].sale.as_str(), report.problems[0].state), (a.as_str(), StreamState::Lost));
    assert!(report.problems[0].detail.contains("still drain"), "{:?}", report.problems);
}

#[tokio::test]
async fn a_stream_key_of_the_wrong_type_is_reported_unreadable_and_the_others_still_drain() {
    let app = spawn_app().await;
    let (a, b) = two_sales(&app).await;
    assert_eq!(app.buy(&a, "early").await.status(), 201);
    app.wait_for_drain(&a).await;

    let (stream, _) = app.orders_stream(&a);
    let _: i64 = app.redis.clone().del(&stream).await.unwrap();
    let _: () = app.redis.clone().set(&stream, "not a stream").await.unwrap();
    assert_eq!(app.buy(&b, "later").await.status(), 201);
    // A purchase in the damaged sale fails before writing anything (no buyer without an order).
    let keys = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&a).unwrap());
    let stock_before: i64 = app.redis.clone().get(&keys.stock).await.unwrap();
    let refused = app.buy(&a, "into-the-damage").await;
    assert!(refused.status().is_server_error(), "{}", refused.status());
    let stock_after: i64 = app.redis.clone().get(&keys.stock).await.unwrap();
    let buyer: bool = app.redis.clone().sismember(&keys.buyers, "into-the-damage").await.unwrap();
    assert_eq!((stock_after, buyer), (stock_before, false), "nothing written");

    let status = app.wait_for_drain_within(&b, Duration::from_secs(20)).await;
    assert_eq!(status.persisted, Some(1), "b's order landed");
    let body = wait_for_problem(&app, &a, "unreadable").await;
    let detail = body["worker"]["problems"][0]["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("string"), "{body}");
    let overview = overview(&app).await;
    assert_eq!(overview["unreadable"][0]["sale_id"], a.as_str(), "{overview}");
    assert_eq!(overview["sales"][0]["sale_id"], b.as_str(), "the healthy sale is still listed: {overview}");
}

#[tokio::test]
async fn a_destroyed_consumer_group_is_restored_and_both_sales_drain() {
    let app = spawn_app().await;
    let (a, b) = two_sales(&app).await;
    assert_eq!(app.buy(&a, "early").await.status(), 201);
    app.wait_for_drain(&a).await;

    let (stream, group) = app.orders_stream(&a);
    let destroyed: i64 =
        redis::cmd("XGROUP").arg("DESTROY").arg(&stream).arg(group).query_async(&mut app.redis.clone()).await.unwrap();
    assert_eq!(destroyed, 1);
    assert_eq!(app.buy(&b, "in-b").await.status(), 201);
    assert_eq!(app.buy(&a, "in-a").await.status(), 201);

    assert_eq!(app.wait_for_drain_within(&b, Duration::from_secs(20)).await.persisted, Some(1));
    assert_eq!(app.wait_for_drain_within(&a, Duration::from_secs(20)).await.persisted, Some(2));
    let body = readyz(&app).await;
    assert_eq!(body["worker"]["status"], "ok", "{body}");
}

/// The consumers of the sale's group, with their pending counts.
async fn consumers(app: &TestApp, sale: &str) -> Vec<(String, usize)> {
    let (stream, group) = app.orders_stream(sale);
    let reply: redis::streams::StreamInfoConsumersReply =
        app.redis.clone().xinfo_consumers(&stream, group).await.unwrap();
    let mut found: Vec<_> = reply.consumers.into_iter().map(|c| (c.name, c.pending)).collect();
    found.sort();
    found
}

#[tokio::test]
async fn consumers_idle_past_the_claim_timeout_with_nothing_pending_are_removed() {
    let app = spawn_app_with(|_| {}, false).await;
    let (a, _) = two_sales(&app).await;
    assert_eq!(app.buy(&a, "u").await.status(), 201);
    let (stream, group) = app.orders_stream(&a);
    // "holder" was delivered the order and died; "gone" read nothing and died.
    let options = StreamReadOptions::default().group(group, "holder").count(10);
    let read: Option<StreamReadReply> = app.redis.clone().xread_options(&[&stream], &[">"], &options).await.unwrap();
    assert!(read.is_some());
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg(&stream)
        .arg(group)
        .arg("gone")
        .query_async(&mut app.redis.clone())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;

    let mut worker = app.manual_worker("rescuer", Duration::from_millis(100));
    worker.step().await.unwrap();

    let after_first = consumers(&app, &a).await;
    assert!(!after_first.iter().any(|(name, _)| name == "gone"), "idle, nothing pending: removed: {after_first:?}");
    assert!(after_first.iter().any(|(name, _)| name == "holder"), "had an order pending: kept: {after_first:?}");
    // The step claimed holder's order; once holder is idle with nothing pending, it goes too.
    tokio::time::sleep(Duration::from_millis(120)).await;
    worker.step().await.unwrap();
    let after = consumers(&app, &a).await;
    assert!(after.iter().all(|(name, _)| name == "rescuer"), "{after:?}");
    assert_eq!(app.order_ids(&a).await.len(), 1);
}

#[tokio::test]
async fn the_insert_deadline_fires_instead_of_hanging_on_a_locked_table() {
    let app = spawn_app_with(|_| {}, false).await;
    let (a, _) = two_sales(&app).await;
    assert_eq!(app.buy(&a, "u").await.status(), 201);
    let mut lock = app.pool.begin().await.unwrap();
    sqlx::query("lock table orders in access exclusive mode").execute(&mut *lock).await.unwrap();

    let redis = seckill::redis::connection::connect(&app.config.redis_url, Duration::from_secs(5)).unwrap();
    let settings = WorkerSettings {
        key_prefix: app.config.key_prefix.clone(),
        consumer: "w".into(),
        batch: 100,
        block: Duration::from_millis(50),
        claim_timeout: Duration::from_secs(60),
        insert_timeout: Duration::from_millis(500),
    };
    let mut worker = Worker::new(redis, app.pool.clone(), settings, Default::default());
    let started = Instant::now();
    let step = tokio::time::timeout(Duration::from_secs(5), worker.step()).await;

    let error = step.expect("the step returned instead of hanging").expect_err("the insert gave up");
    assert!(format!("{error:#}").contains("no answer within"), "{error:#}");
    println!("the step gave up after {:?}", started.elapsed());
    lock.rollback().await.unwrap();
    let mut drained = false;
    for _ in 0..10 {
        if worker.step().await.unwrap() == StepOutcome::Idle && app.order_ids(&a).await.len() == 1 {
            drained = true;
            break;
        }
    }
    assert!(drained, "the order left pending lands once the lock is gone");
}

/// The meta's count of orders beyond one per entry (`queued_extra`) counts nothing once the
/// stream has no entry: a sale whose stream was lost with the count kept queues nothing (it would
/// have refused its retirement for good), and a count that drifted ends with the stream's last
/// entry, cleared by the trim.
#[tokio::test]
async fn a_queue_count_left_without_its_entries_counts_nothing_and_ends_with_the_stream() {
    let app = spawn_app_with(|_| {}, false).await;
    let (a, b) = two_sales(&app).await;
    let meta = |sale: &str| app.store.keyspace().sale_keys(&SaleId::parse(sale).unwrap()).meta;
    let _: () = app.redis.clone().hset(meta(&a), "queued_extra", 2).await.unwrap();
    assert_eq!(app.status(&a).await.queued, 0, "no entry in a's stream: no order queued");

    assert_eq!(app.buy(&b, "queued-in-b").await.status(), 201);
    let _: () = app.redis.clone().hset(meta(&b), "queued_extra", 4).await.unwrap();
    assert_eq!(app.status(&b).await.queued, 5, "one entry, counted with the drifted count");
    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    for _ in 0..10 {
        if worker.step().await.unwrap() == StepOutcome::Idle {
            break;
        }
    }
    assert_eq!(app.order_ids(&b).await.len(), 1);
    let left: Option<i64> = app.redis.clone().hget(meta(&b), "queued_extra").await.unwrap();
    assert_eq!(left, None, "cleared with the stream's last entry");
    assert_eq!(app.status(&b).await.queued, 0);
}
