//! Reservations against real processes: a SIGKILL between a release and its record, and a Redis
//! restart while releases are due. Every unit returns exactly once (issue 26).

use std::time::Duration;

use serde_json::json;
use sqlx::Connection;
use tokio::time::Instant;

use crate::common::{self, PAYMENT_SECRET};
use crate::harness::{Deployment, RedisOutage};
use crate::storm_client::Storm;

/// A deployment with payment events enabled, and a sale of `stock` with a `window`, sold out by
/// a storm. Returns the sale.
async fn sold_out_sale(deployment: &Deployment, stock: usize, window: &str) -> String {
    let sale = common::new_sale_id();
    let seeded = deployment.seed(&sale, json!({"stock": stock, "payment_window": window})).await;
    assert_eq!(seeded.status(), 200);
    let storm = Storm::new(&deployment.address, &sale, stock, stock).users_named("holder").run().await;
    assert_eq!(storm.count(201), stock, "{storm:?}");
    deployment.wait_for_drain(&sale).await;
    sale
}

/// SIGKILL of the instance after `lua/release.lua` gave the units back and before Postgres
/// recorded it: the next process re-drives the owed releases and the gate keeps each unit from
/// coming back twice (without it the stock would end at twice the stock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_a_release_and_its_record_returns_each_unit_once() {
    sigkill_between_a_release_and_its_record(&common::redis_url()).await;
}

/// The same on the Redis Cluster: the release script and its gate in the sale's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_a_release_and_its_record_returns_each_unit_once_on_the_cluster() {
    sigkill_between_a_release_and_its_record(&common::cluster().url()).await;
}

async fn sigkill_between_a_release_and_its_record(redis_url: &str) {
    let mut deployment = Deployment::on_redis(redis_url, &[("SECKILL_PAYMENT_SECRET", PAYMENT_SECRET)]).await;
    let mut first = deployment.start().await;
    let stock = 500;
    let sale = sold_out_sale(&deployment, stock, "2s").await;

    // Recording a release (restocked_at) waits on an advisory lock the test holds: the sweeper
    // stops right after the script ran.
    let mut holder = sqlx::PgConnection::connect(&deployment.database_url).await.unwrap();
    for statement in [
        "create function hold_restock() returns trigger language plpgsql as
         $$ begin perform pg_advisory_xact_lock(26); return new; end $$",
        "create trigger hold_restock before update of restocked_at on orders for each row
         when (new.restocked_at is not null) execute function hold_restock()",
    ] {
        sqlx::query(statement).execute(&mut holder).await.unwrap();
    }
    let mut hold = holder.begin().await.unwrap();
    sqlx::query("select pg_advisory_xact_lock(26)").execute(&mut *hold).await.unwrap();

    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity where datname = current_database() and wait_event = 'advisory'",
        )
        .fetch_one(&deployment.pool)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(Instant::now() < until, "the sweeper never reached the record of a release");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before_kill = deployment.status(&sale).await;
    let owed = deployment.standings(&sale).await;
    assert!(before_kill.stock_left > 0, "the script gave units back before the kill: {before_kill:?}");
    assert_eq!(owed.owed, owed.expired, "none recorded yet: {owed:?}");
    first.kill().await;
    hold.rollback().await.unwrap();
    sqlx::query("drop trigger hold_restock on orders").execute(&mut holder).await.unwrap();

    let _second = deployment.start().await;
    let (status, standings) = deployment.assert_settled(&sale, Duration::from_secs(30)).await;
    assert_eq!((status.stock_left, standings.expired), (stock as i64, stock as i64), "{status:?}");
    eprintln!(
        "figures sigkill-mid-release ({redis_url}): reservations={stock} units_back_at_kill={} owed_at_kill={} stock_after={}",
        before_kill.stock_left, owed.owed, status.stock_left
    );
}

/// Redis stopped while reservations fall due: Postgres expires them (the authority), the
/// releases stay owed, and once Redis is back each unit returns once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_while_releases_fall_due_returns_each_unit_once() {
    let mut deployment = Deployment::new(&[("SECKILL_PAYMENT_SECRET", PAYMENT_SECRET)]).await;
    let _service = deployment.start().await;
    let stock = 300;
    let sale = sold_out_sale(&deployment, stock, "3s").await;

    let outage = RedisOutage::begin();
    let until = Instant::now() + Duration::from_secs(20);
    let owed = loop {
        let standings = deployment.standings(&sale).await;
        if standings.expired == stock as i64 {
            break standings;
        }
        assert!(Instant::now() < until, "Postgres did not expire the reservations: {standings:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(owed.owed, stock as i64, "no release while Redis is down: {owed:?}");
    outage.end();
    let until = Instant::now() + Duration::from_secs(10);
    while deployment.store.keyspace().reach().await.is_err() {
        assert!(Instant::now() < until, "the test's Redis connection did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, standings) = deployment.assert_settled(&sale, Duration::from_secs(30)).await;
    assert_eq!((status.stock_left, standings.expired), (stock as i64, stock as i64), "{status:?}");
    // Sold again to new buyers, and nobody twice.
    let again = Storm::new(&deployment.address, &sale, stock, stock).users_named("second").run().await;
    assert_eq!(again.count(201), stock, "{again:?}");
    let (status, _) = deployment.assert_released(&sale, Duration::from_secs(20)).await;
    assert_eq!(status.stock_left, 0);
}

/// Issue 39, read-your-writes: in a sale with a payment window a repeat purchase's 409 names the
/// order's payment state from Postgres. With Postgres stopped it still answers 409 with the
/// order (the receipt's status), never a 503 telling a buyer who bought that nothing was bought.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_purchase_while_postgres_is_down_still_names_the_order() {
    let mut deployment = Deployment::new(&[("SECKILL_PAYMENT_SECRET", PAYMENT_SECRET)]).await;
    let _service = deployment.start().await;
    let sale = sold_out_sale(&deployment, 3, "10m").await;
    let bought = deployment.buy(&sale, "holder-0").await;
    assert_eq!(bought.status(), 409);
    let before: serde_json::Value = bought.json().await.unwrap();
    assert_eq!(before["status"], "reserved", "{before}");

    let outage = crate::harness::PostgresOutage::begin();
    let during = deployment.buy(&sale, "holder-0").await;
    let status = during.status().as_u16();
    let body: serde_json::Value = during.json().await.unwrap();
    outage.end();
    assert_eq!(status, 409, "{body}");
    assert_eq!((body["error"].as_str(), &body["order_id"]), (Some("already_purchased"), &before["order_id"]), "{body}");
    assert_eq!(body["status"], "confirmed", "the receipt's own status: {body}");
}
