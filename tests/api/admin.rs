//! Admin routes: authentication, seeding, re-seeding and status.

use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, assert_error, new_sale_id, spawn_app, spawn_app_with};

#[tokio::test]
async fn admin_routes_refuse_missing_wrong_and_almost_right_tokens_with_401() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    let almost = &ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1];
    let longer = format!("{ADMIN_TOKEN}x");
    let headers: Vec<Option<String>> = vec![
        None,
        Some("Bearer wrong".into()),
        Some(format!("Bearer {almost}")),
        Some(format!("Bearer {longer}")),
        Some(format!("bearer{ADMIN_TOKEN}")),
        Some(format!("Basic {ADMIN_TOKEN}")),
        Some(ADMIN_TOKEN.to_owned()),
    ];
    for header in headers {
        let mut put = app.client.put(app.url(&format!("/admin/sales/{sale}"))).json(&json!({"stock": 5}));
        let mut get = app.client.get(app.url(&format!("/admin/sales/{sale}")));
        let mut list = app.client.get(app.url("/admin/sales"));
        if let Some(h) = &header {
            put = put.header("authorization", h);
            get = get.header("authorization", h);
            list = list.header("authorization", h);
        }
        let response = put.send().await.unwrap();
        assert_eq!(response.headers()["www-authenticate"], "Bearer", "{header:?}");
        assert_error(response, 401, "unauthorized").await;
        assert_error(get.send().await.unwrap(), 401, "unauthorized").await;
        assert_error(list.send().await.unwrap(), 401, "unauthorized").await;
    }
    // Nothing was seeded by any of them.
    assert_error(app.buy(&sale, "alice").await, 404, "unknown_sale").await;
}

#[tokio::test]
async fn admin_routes_answer_403_when_no_token_is_configured() {
    let app = spawn_app_with(|c| c.admin_token = None, false).await;
    let sale = new_sale_id();
    let response = app.seed(&sale, json!({"stock": 5})).await;
    assert_error(response, 403, "admin_disabled").await;
    assert_error(app.buy(&sale, "alice").await, 404, "unknown_sale").await;
    for path in ["/admin", "/admin/sales"] {
        let response = app.client.get(app.url(path)).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
        assert_error(response, 403, "admin_disabled").await;
    }
}

#[tokio::test]
async fn seeding_creates_the_sale_in_redis_and_postgres_and_reports_its_state() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    let response = app
        .seed(&sale, json!({"stock": 7, "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2999-01-01T00:00:00+02:00"}))
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"sale_id": sale, "stock_initial": 7, "stock_left": 7, "sold": 0, "persisted": 0, "queued": 0,
               "shards": 1, "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2998-12-31T22:00:00Z",
               "payment_window_ms": null, "released": 0, "reserved": 0, "paid": 0, "cancelled": 0, "expired": 0,
               "refunded": 0, "late_payments": 0, "queue_rate": null, "units_sold": 0, "units_released": 0,
               "units_reserved": 0, "units_paid": 0, "units_refunded_held": 0, "per_buyer": 1})
    );
    assert_eq!(app.sales_row_stock(&sale).await, 7);
}

#[tokio::test]
async fn re_seeding_a_sale_without_buyers_replaces_its_stock() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    app.seed_stock(&sale, 9).await;
    let status = app.status(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left), (9, 9));
}

#[tokio::test]
async fn re_seeding_a_sale_with_buyers_is_409_and_erases_nobody() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    assert_eq!(app.buy(&sale, "alice").await.status(), 201);

    assert_error(app.seed(&sale, json!({"stock": 100})).await, 409, "sale_in_progress").await;

    let status = app.status(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold), (3, 2, 1));
    assert_eq!(app.sales_row_stock(&sale).await, 3, "the refused re-seed must not change the Postgres record either");
    assert_error(app.buy(&sale, "alice").await, 409, "already_purchased").await;
}

#[tokio::test]
async fn malformed_seeds_are_400_and_change_nothing() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 4).await;
    let cases = [
        json!({"stock": -1}),
        json!({"stock": 10_000_001}),
        json!({"stock": 1.5}),
        json!({"stock": "10"}),
        json!({}),
        json!({"stock": 5, "starts_at": "tomorrow"}),
        json!({"stock": 5, "ends_at": "2026-13-01T00:00:00Z"}),
        json!({"stock": 5, "starts_at": "2030-01-01T00:00:00Z", "ends_at": "2029-01-01T00:00:00Z"}),
        json!({"stock": 5, "starts_at": "2030-01-01T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"}),
        json!({"stock": 5, "colour": "red"}),
        // Issue 39: serde reads a struct from a sequence of its fields; a body is an object.
        json!([5]),
        json!([5, "2030-01-01T00:00:00Z"]),
        json!({"stock": 5, "starts_at": "2030-01-01T00:00:00Z", "queue": ["2029-12-31T00:00:00Z", 10]}),
        // Valid RFC 3339, but past the year 9999 in UTC: Postgres's encoding of it panicked.
        json!({"stock": 5, "ends_at": "9999-12-31T23:59:59-01:00"}),
        json!({"stock": 5, "starts_at": "9999-12-31T23:30:00-01:00"}),
        json!({"stock": 5, "starts_at": "9999-12-31T23:30:00-01:00", "queue": {"opens_at": "9999-12-31T23:00:00-01:00", "rate": 10}}),
    ];
    for body in cases {
        assert_error(app.seed(&sale, body.clone()).await, 400, "invalid_request").await;
    }
    let bad_path = app
        .client
        .put(app.url("/admin/sales/has%20space"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"stock": 1}))
        .send()
        .await
        .unwrap();
    assert_error(bad_path, 400, "invalid_request").await;
    let status = app.status(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.starts_at), (4, 4, None));
}

#[tokio::test]
async fn the_status_of_an_unknown_sale_is_404() {
    let app = spawn_app().await;
    let response = app
        .client
        .get(app.url(&format!("/admin/sales/{}", new_sale_id())))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_error(response, 404, "unknown_sale").await;
}

#[tokio::test]
async fn a_stock_written_with_a_zero_fraction_is_an_integer_and_a_real_fraction_is_not() {
    // JSON Schema's `integer` (the OpenAPI document) allows 7.0, so clients may send it.
    let app = spawn_app().await;
    let sale = new_sale_id();
    let seeded = app.seed(&sale, json!({"stock": 7.0})).await;
    assert_eq!(seeded.status(), 200);
    assert_eq!(seeded.json::<Value>().await.unwrap()["stock_initial"], 7);
    assert_error(app.seed(&sale, json!({"stock": 7.5})).await, 400, "invalid_request").await;
}
