//! The order exports: a sale's and a drop's orders as CSV or NDJSON, filtered by status.

use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, spawn_app_with};
use crate::operators::Crew;

async fn export(app: &TestApp, token: &str, path: &str, accept: Option<&str>) -> reqwest::Response {
    let request = app.client.get(app.url(path)).bearer_auth(token);
    let request = if let Some(accept) = accept { request.header("accept", accept) } else { request };
    request.send().await.unwrap()
}

#[tokio::test]
async fn a_viewer_exports_a_sales_and_a_drops_orders_as_csv_or_ndjson_by_status() {
    let crew = Crew::new();
    let app = spawn_app_with(|c| crew.enlist(c), true).await;
    let drop = format!("d{}", uuid::Uuid::now_v7().simple());
    let (s40, s41, other) = (format!("{drop}.40"), format!("{drop}.41"), format!("{drop}x.40"));
    for sale in [&s40, &s41, &other] {
        app.seed_stock(sale, 10).await;
    }
    for (sale, user) in [(&s40, "ann"), (&s40, "=cmd,\"x\""), (&s41, "bob"), (&other, "eve")] {
        assert_eq!(app.buy(sale, user).await.status(), 201);
    }
    for sale in [&s40, &s41, &other] {
        app.wait_for_drain(sale).await;
    }
    sqlx::query("update orders set status = 'paid', pay_by = now() where user_id = 'bob'")
        .execute(&app.pool)
        .await
        .unwrap();

    let csv = export(&app, &crew.viewer, &format!("/admin/sales/{s40}/orders"), None).await;
    assert_eq!(csv.status(), 200);
    assert_eq!(csv.headers()["content-type"], "text/csv; charset=utf-8");
    let disposition = csv.headers()["content-disposition"].to_str().unwrap().to_owned();
    assert_eq!(disposition, format!("attachment; filename=\"{s40}-orders.csv\""));
    let text = csv.text().await.unwrap();
    let lines: Vec<&str> = text.split_terminator("\r\n").collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[1].contains(&format!(",{s40},\"'=cmd,\"\"x\"\"\",1,confirmed,")), "{text}");
    assert!(lines[2].contains(&format!(",{s40},ann,1,confirmed,")), "in the buyers' order: {text}");

    let ndjson = export(&app, &crew.viewer, &format!("/admin/drops/{drop}/orders"), Some("application/x-ndjson")).await;
    assert_eq!(ndjson.headers()["content-type"], "application/x-ndjson");
    let orders: Vec<Value> = ndjson.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let users: Vec<&str> = orders.iter().map(|o| o["user_id"].as_str().unwrap()).collect();
    assert_eq!(users, ["=cmd,\"x\"", "ann", "bob"], "the drop's sales only, by sale then buyer");
    let stored: i64 = sqlx::query_scalar("select count(*) from orders where sale_id like $1")
        .bind(format!("{drop}.%"))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 3);

    let paid_path = format!("/admin/drops/{drop}/orders?format=ndjson&status=paid,expired");
    let paid = export(&app, ADMIN_TOKEN, &paid_path, None).await.text().await.unwrap();
    let paid: Vec<Value> = paid.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(paid.len(), 1);
    assert_eq!(
        (&paid[0]["user_id"], &paid[0]["status"], &paid[0]["sale_id"]),
        (&json!("bob"), &json!("paid"), &json!(s41))
    );
    let none = export(&app, ADMIN_TOKEN, &format!("/admin/sales/{s41}/orders?status=cancelled"), None).await;
    assert_eq!(none.text().await.unwrap().lines().count(), 1, "the header alone");

    for (path, status, code) in [
        (format!("/admin/sales/{drop}.39/orders"), 404, "unknown_sale"),
        (format!("/admin/drops/{drop}y/orders"), 404, "unknown_drop"),
        (format!("/admin/drops/{drop}.40/orders"), 400, "invalid_request"),
        (format!("/admin/sales/{s40}/orders?status=shipped"), 400, "invalid_request"),
        (format!("/admin/sales/{s40}/orders?format=xml"), 400, "invalid_request"),
        // A misspelt filter would otherwise export every order as if it were the filtered list.
        (format!("/admin/sales/{s40}/orders?state=paid"), 400, "invalid_request"),
        (format!("/admin/drops/{drop}/orders?format=csv&statuses=paid"), 400, "invalid_request"),
    ] {
        assert_error(export(&app, ADMIN_TOKEN, &path, None).await, status, code).await;
    }
    assert_error(export(&app, "nobody", &format!("/admin/sales/{s40}/orders"), None).await, 401, "unauthorized").await;
}

/// An export streams a page at a time for as long as its reader takes a chunk every write
/// deadline, a page in memory and a query per page each: an instance streams at most
/// `exports::MAX_CONCURRENT` at once. Past that an export is refused 429 `too_many_exports` with
/// `Retry-After`, and a reader gone frees its place.
#[tokio::test]
async fn an_instance_streams_at_most_four_exports_at_once() {
    // A reader that stops reading is not cut off by the write deadline while the test runs.
    let app = spawn_app_with(|c| c.edge.response_write_timeout = std::time::Duration::from_secs(600), true).await;
    let sale = format!("x{}", uuid::Uuid::now_v7().simple());
    app.seed_stock(&sale, 1).await;
    // Some 10 MB of CSV, far more than the sockets and the server's buffers hold: a reader that
    // takes nothing keeps its export waiting (rows put straight in Postgres: the export reads it).
    sqlx::query(
        "insert into orders (order_id, sale_id, user_id, created_at) \
         select gen_random_uuid(), $1, 'bulk-' || lpad(g::text, 6, '0'), now() from generate_series(1, 100000) g",
    )
    .bind(&sale)
    .execute(&app.pool)
    .await
    .unwrap();
    let path = format!("/admin/sales/{sale}/orders");
    let mut held = vec![];
    for _ in 0..seckill::exports::MAX_CONCURRENT {
        let response = export(&app, ADMIN_TOKEN, &path, None).await;
        assert_eq!(response.status(), 200);
        held.push(response); // its body never read
    }
    let refused = export(&app, ADMIN_TOKEN, &path, None).await;
    assert_eq!(refused.headers()["retry-after"], "5");
    assert_error(refused, 429, "too_many_exports").await;

    held.pop(); // that reader gone: its export ends at its next write
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let response = export(&app, ADMIN_TOKEN, &path, None).await;
        if response.status() == 200 {
            break;
        }
        assert!(std::time::Instant::now() < until, "the place was not freed");
        assert_error(response, 429, "too_many_exports").await;
    }
}
