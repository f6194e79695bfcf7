//! Many buyers at once against a small stock.

use std::collections::BTreeSet;

use futures::future::join_all;
use uuid::Uuid;

use crate::helpers::{new_sale_id, spawn_app_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_buyers_get_exactly_the_stock_and_postgres_holds_exactly_those_orders() {
    // 400 buyers at once from one address: no per-client connection cap here.
    let app = spawn_app_with(|config| config.edge.max_connections_per_client = 0, true).await;
    let sale = new_sale_id();
    let stock = 50;
    let buyers = 400;
    app.seed_stock(&sale, stock).await;

    let responses = join_all((0..buyers).map(|i| {
        let app = &app;
        let sale = &sale;
        async move {
            let response = app.buy(sale, &format!("user-{i}")).await;
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap();
            (status, body)
        }
    }))
    .await;

    let created: BTreeSet<Uuid> = responses
        .iter()
        .filter(|(s, _)| *s == 201)
        .map(|(_, b)| b["order_id"].as_str().unwrap().parse().unwrap())
        .collect();
    let sold_out = responses.iter().filter(|(s, b)| *s == 410 && b["error"] == "sold_out").count();
    assert_eq!(created.len(), stock as usize, "exactly the stock is sold");
    assert_eq!(sold_out, buyers - stock as usize, "everyone else is told sold out");
    let status = app.assert_invariants(&sale, &created).await;
    assert_eq!((status.stock_left, status.sold, status.persisted), (0, stock, Some(stock)));
    assert_eq!(app.order_ids(&sale).await, created, "Postgres holds exactly the confirmed orders");
}
