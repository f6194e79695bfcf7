//! Graceful shutdown: the server stops accepting and the worker finishes its batch.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::join_all;
use seckill::domain::SaleId;
use seckill::orders::queue;
use seckill::redis::order_stream::CONSUMER_GROUP;

use crate::helpers::{new_sale_id, spawn_app_with};

#[tokio::test]
async fn cancelling_stops_the_server_and_the_idle_worker_cleanly() {
    let mut app = spawn_app_with(|_| {}, true).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;
    let mut confirmed = BTreeSet::new();
    for i in 0..5 {
        let body: serde_json::Value = app.buy(&sale, &format!("u{i}")).await.json().await.unwrap();
        confirmed.insert(body["order_id"].as_str().unwrap().parse().unwrap());
    }
    app.assert_invariants(&sale, &confirmed).await;

    app.shutdown.cancel();
    let server = std::mem::replace(&mut app.server, tokio::spawn(async { Ok(()) }));
    let finished = tokio::time::timeout(Duration::from_secs(10), server).await;

    let result = finished.expect("shutdown within the block time and grace period").expect("task did not panic");
    assert!(result.is_ok(), "clean exit: {result:?}");
    assert!(app.client.get(app.url("/healthz")).send().await.is_err(), "no longer accepting connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_in_flight_at_shutdown_is_committed_after_the_http_workers_have_stopped() {
    let mut app = spawn_app_with(|c| c.database_max_connections = 8, true).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;
    // Concurrent admin reads make the service's pool open connections from the HTTP workers'
    // runtimes, which stop with the server.
    join_all((0..16).map(|_| app.status(&sale))).await;

    // Hold the worker's next insert until the HTTP server has stopped.
    let mut lock = app.pool.begin().await.unwrap();
    sqlx::query("lock table orders in exclusive mode").execute(&mut *lock).await.unwrap();
    let users: BTreeSet<String> = (0..20).map(|i| format!("u{i}")).collect();
    for user in &users {
        assert_eq!(app.buy(&sale, user).await.status(), 201);
    }
    // Wait until the worker has read a batch and its insert waits for the lock (in this test's
    // database: another test parks an insert of its own on a lock).
    let waiting_insert = "select count(*) from pg_stat_activity where datname = current_database() \
                          and wait_event_type = 'Lock' and query ilike '%insert into orders%'";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sqlx::query_scalar::<_, i64>(waiting_insert).fetch_one(&app.pool).await.unwrap() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the worker never tried to insert");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The batch in flight: delivered to the worker, not acknowledged. (If the worker found the
    // sale in the middle of the purchases, the rest are still queued, never delivered.)
    let stream = app.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap()).orders;
    let (in_flight, ..): (usize, redis::Value, redis::Value, redis::Value) =
        redis::cmd("XPENDING").arg(&stream).arg(CONSUMER_GROUP).query_async(&mut app.redis.clone()).await.unwrap();
    assert!(in_flight > 0);

    app.shutdown.cancel();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while app.client.get(app.url("/healthz")).send().await.is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "the server still answers after the cancel");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The HTTP workers' runtimes wind down meanwhile: the longer the lock is held, the more surely
    // the batch's commit meets a connection their stop broke (the bug this guards against). No
    // state tells that they have stopped, so this only widens the window; no assertion rests on it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    lock.rollback().await.unwrap();
    let server = std::mem::replace(&mut app.server, tokio::spawn(async { Ok(()) }));
    let result = tokio::time::timeout(Duration::from_secs(15), server).await.expect("stops").expect("no panic");
    assert!(result.is_ok(), "clean exit: {result:?}");

    let committed: BTreeSet<String> = app.order_users(&sale).await.into_iter().map(|(user, _)| user).collect();
    let queued: BTreeSet<String> =
        queue::queued_users(&app.store, &SaleId::parse(&sale).unwrap()).await.unwrap().into_iter().collect();
    assert_eq!(committed.len(), in_flight, "the batch in flight is committed before the worker stops");
    assert!(committed.is_disjoint(&queued), "committed orders are acknowledged: committed {committed:?}");
    assert_eq!(&committed | &queued, users, "nothing lost: the rest stays queued for the next worker");
}
