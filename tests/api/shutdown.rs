//! Graceful shutdown: the server stops accepting and the worker finishes its batch.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::helpers::{new_sale_id, spawn_app_with};

#[tokio::test]
async fn cancelling_stops_server_and_worker_cleanly_after_committing_their_work() {
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
