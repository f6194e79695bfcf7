//! A retirement that ended the sale and was then refused (something committed after its first
//! look) leaves the sale ended in Postgres as well as in Redis: should Redis lose it afterwards,
//! reconciliation's repair seeds it again from its row ended, not open for a second life.

use serde_json::{Value, json};

use crate::helpers::{assert_error, new_sale_id, spawn_app};
use crate::redis_loss::{lose_sale, repair};
use crate::retire::retire;

#[tokio::test]
async fn a_retirement_refused_after_its_end_leaves_the_sale_ended_in_its_row_for_a_repair() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 2).await;
    for user in ["a", "b"] {
        assert_eq!(app.buy(&sale, user).await.status(), 201);
    }
    app.wait_for_drain(&sale).await;
    // What a reservation committing between the retirement's first look and its last does (a
    // refund with restock racing it), made certain: the mark itself reopens an order.
    for statement in [
        "create function reopen_on_mark() returns trigger language plpgsql as $$ begin
             update orders set status = 'reserved', pay_by = now() + interval '1 hour' where sale_id = new.sale_id;
             return new;
         end $$",
        "create trigger reopen_on_mark after update of retired_at on sales
             for each row when (new.retired_at is not null) execute function reopen_on_mark()",
    ] {
        sqlx::query(statement).execute(&app.pool).await.unwrap();
    }

    let response = retire(&app, &sale).await;
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert_eq!((&body["error"], &body["reasons"]), (&json!("not_retirable"), &json!(["reserved"])), "{body}");
    let (retired, ended): (bool, bool) =
        sqlx::query_as("select retired_at is not null, ends_at is not null from sales where sale_id = $1")
            .bind(&sale)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert!(!retired, "the mark is taken back");
    assert!(ended, "the row records the end the retirement gave the sale in Redis");

    sqlx::query("drop trigger reopen_on_mark on sales").execute(&app.pool).await.unwrap();
    lose_sale(&app, &sale).await;
    assert!(repair(&app, &sale).await.sale_restored);
    assert!(app.status(&sale).await.ends_at.is_some(), "seeded again ended");
    assert_error(app.buy(&sale, "c").await, 403, "sale_ended").await;
}
