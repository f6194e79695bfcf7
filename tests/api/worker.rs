//! The worker: stream -> Postgres, acknowledged only after commit, nothing stranded or doubled.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::AsyncCommands;
use redis::streams::{StreamReadOptions, StreamReadReply};
use seckill::db;
use seckill::domain::{Order, SaleId, UserId};
use seckill::orders::worker::StepOutcome;
use seckill::redis::keys::SaleKeys;
use seckill::redis::order_stream::{self, CONSUMER_GROUP};
use uuid::Uuid;

use crate::helpers::{TestApp, new_sale_id, spawn_app_with};

/// Buys `n` orders on an app without a worker, so they stay queued.
async fn queued_sale(app: &TestApp, n: usize) -> (String, BTreeSet<Uuid>) {
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;
    let mut ids = BTreeSet::new();
    for i in 0..n {
        let response = app.buy(&sale, &format!("user-{i}")).await;
        assert_eq!(response.status(), 201);
        let body: serde_json::Value = response.json().await.unwrap();
        ids.insert(body["order_id"].as_str().unwrap().parse().unwrap());
    }
    assert_eq!(app.status(&sale).await.queued, n as i64);
    (sale, ids)
}

/// Delivers the sale's new entries to `consumer` without acknowledging them, as a consumer that
/// then dies would.
async fn deliver_to(app: &TestApp, sale: &str, consumer: &str) -> Vec<String> {
    let (stream, group) = app.orders_stream(sale);
    let options = StreamReadOptions::default().group(group, consumer).count(1000);
    let reply: Option<StreamReadReply> = app.redis.clone().xread_options(&[&stream], &[">"], &options).await.unwrap();
    let reply = reply.expect("entries to deliver");
    reply.keys.into_iter().flat_map(|k| k.ids).map(|e| e.id).collect()
}

async fn pending_count(app: &TestApp, sale: &str) -> usize {
    let (stream, group) = app.orders_stream(sale);
    let reply: redis::streams::StreamPendingReply = app.redis.clone().xpending(&stream, group).await.unwrap();
    reply.count()
}

async fn step_until_idle(worker: &mut seckill::orders::worker::Worker) {
    for _ in 0..50 {
        if worker.step().await.unwrap() == StepOutcome::Idle {
            return;
        }
    }
    panic!("the worker never became idle");
}

#[tokio::test]
async fn orders_left_pending_by_a_dead_consumer_are_claimed_and_persisted() {
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, ids) = queued_sale(&app, 5).await;
    assert_eq!(deliver_to(&app, &sale, "dead-consumer").await.len(), 5);
    tokio::time::sleep(Duration::from_millis(30)).await;

    let mut worker = app.manual_worker("rescuer", Duration::from_millis(20));
    let first = worker.step().await.unwrap();

    assert_eq!(first, StepOutcome::Processed { entries: 5 });
    assert_eq!(worker.stats().reclaimed, 5);
    assert_eq!(app.order_ids(&sale).await, ids);
    assert_eq!(pending_count(&app, &sale).await, 0);
    app.assert_invariants(&sale, &ids).await;
}

#[tokio::test]
async fn entries_pending_less_than_the_claim_timeout_are_left_to_their_consumer() {
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, _) = queued_sale(&app, 2).await;
    deliver_to(&app, &sale, "alive-consumer").await;

    let mut worker = app.manual_worker("other", Duration::from_secs(60));
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Idle);
    assert_eq!(pending_count(&app, &sale).await, 2);
    assert!(app.order_ids(&sale).await.is_empty());
}

/// The orders in the sale's stream, as the worker would parse them.
async fn stream_orders(app: &TestApp, sale: &str) -> Vec<Order> {
    let (stream, _) = app.orders_stream(sale);
    let entries: redis::streams::StreamRangeReply = app.redis.clone().xrange_all(&stream).await.unwrap();
    let sale = seckill::domain::SaleId::parse(sale).unwrap();
    entries.ids.iter().flat_map(|e| seckill::redis::order_stream::decode(e, &sale).unwrap()).collect()
}

#[tokio::test]
async fn a_crash_between_insert_and_ack_redelivers_without_duplicates() {
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, ids) = queued_sale(&app, 4).await;
    // A worker read the entries and committed them, then died before acknowledging.
    deliver_to(&app, &sale, "crashed").await;
    let report = db::insert_orders(&app.pool, &stream_orders(&app, &sale).await, db::Hint::Quiet).await.unwrap();
    assert_eq!(report.inserted, 4);
    tokio::time::sleep(Duration::from_millis(10)).await;

    let mut worker = app.manual_worker("successor", Duration::from_millis(1));
    step_until_idle(&mut worker).await;

    assert_eq!(worker.stats().redelivered, 4, "the redelivered orders were recognised");
    assert_eq!(worker.stats().inserted, 0, "and not written again");
    assert_eq!(pending_count(&app, &sale).await, 0);
    app.assert_invariants(&sale, &ids).await;
}

#[tokio::test]
async fn a_different_order_for_a_user_who_already_has_one_is_counted_and_acknowledged() {
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, ids) = queued_sale(&app, 1).await;
    let (stream, _) = app.orders_stream(&sale);
    let forged = Order {
        order_id: Uuid::now_v7(),
        sale_id: SaleId::parse(&sale).unwrap(),
        user_id: UserId::parse("user-0").unwrap(),
        created_at_ms: 1,
        pay_by_ms: None,
        quantity: 1,
    };
    let _: String = app.redis.clone().xadd(&stream, "*", &seckill::redis::order_stream::encode(&forged)).await.unwrap();

    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    step_until_idle(&mut worker).await;

    assert_eq!(worker.stats().conflicts, 1);
    assert_eq!(app.order_ids(&sale).await, ids, "the first order stands");
    assert_eq!(app.status(&sale).await.queued, 0, "the conflict is not retried forever");
}

#[tokio::test]
async fn malformed_entries_are_dropped_with_an_error_not_retried_forever() {
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, ids) = queued_sale(&app, 2).await;
    let (stream, _) = app.orders_stream(&sale);
    let _: String = app.redis.clone().xadd(&stream, "*", &[("order_id", "not-a-uuid")]).await.unwrap();

    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    step_until_idle(&mut worker).await;

    assert_eq!(worker.stats().malformed, 1);
    assert_eq!(app.order_ids(&sale).await, ids);
    assert_eq!(app.status(&sale).await.queued, 0);
}

/// An entry of several orders with one bad line (none is written so today; a damaged key or a
/// form of a later release might): that order is dropped with an error, the others of the entry
/// are stored, and the entry leaves the queue.
#[tokio::test]
async fn a_bad_line_drops_only_its_own_order_not_the_others_of_its_entry() {
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, _) = queued_sale(&app, 0).await;
    let (stream, _) = app.orders_stream(&sale);
    let (good, other) = (Uuid::now_v7(), Uuid::now_v7());
    let lines = format!("{good} 1 - ann\nnot-a-uuid 1 - bob\n{other} 2 - cy");
    let _: String = app.redis.clone().xadd(&stream, "*", &[("orders", lines)]).await.unwrap();

    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    step_until_idle(&mut worker).await;

    assert_eq!(worker.stats().malformed, 1);
    assert_eq!(app.order_ids(&sale).await, BTreeSet::from([good, other]), "the good lines' orders are stored");
    assert_eq!(pending_count(&app, &sale).await, 0);
}

#[tokio::test]
async fn when_the_insert_fails_nothing_is_acknowledged_and_the_backlog_drains_after() {
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, ids) = queued_sale(&app, 3).await;
    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    // The worker knows the sale; then its inserts start failing.
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Processed { entries: 3 });
    let (more_sale, more_ids) = queued_sale(&app, 2).await;
    sqlx::query("alter table orders rename to orders_away").execute(&app.pool).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await; // past the worker's sale-list refresh

    let failed = worker.step().await;

    assert!(failed.is_err(), "the insert must fail: {failed:?}");
    assert_eq!(pending_count(&app, &more_sale).await, 2, "delivered, not acknowledged");
    assert_eq!(app.status(&more_sale).await.queued, 2);

    sqlx::query("alter table orders_away rename to orders").execute(&app.pool).await.unwrap();
    step_until_idle(&mut worker).await;

    assert_eq!(pending_count(&app, &more_sale).await, 0);
    app.assert_invariants(&sale, &ids).await;
    app.assert_invariants(&more_sale, &more_ids).await;
}

#[tokio::test]
async fn orders_reach_postgres_even_when_the_sales_row_is_missing() {
    // The seed's Postgres commit can fail after Redis accepted it; the sale is live anyway, so its
    // stream must still be read. The worker starts only after the row is gone.
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, ids) = queued_sale(&app, 2).await;
    sqlx::query("delete from sales where sale_id = $1").bind(&sale).execute(&app.pool).await.unwrap();

    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    step_until_idle(&mut worker).await;

    assert_eq!(app.order_ids(&sale).await, ids);
    app.assert_invariants(&sale, &ids).await;
}

#[tokio::test]
async fn orders_are_still_consumed_after_their_stream_lost_its_consumer_group() {
    let app = spawn_app_with(|_| {}, true).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;
    assert_eq!(app.buy(&sale, "before").await.status(), 201);
    app.wait_for_drain(&sale).await;

    // The group is gone (as after a failover that lost it), with no re-seed to bring it back.
    let (stream, group) = app.orders_stream(&sale);
    let destroyed: i64 =
        redis::cmd("XGROUP").arg("DESTROY").arg(&stream).arg(group).query_async(&mut app.redis.clone()).await.unwrap();
    assert_eq!(destroyed, 1);
    assert_eq!(app.buy(&sale, "after").await.status(), 201);

    let status = app.wait_for_drain(&sale).await;
    assert_eq!((status.sold, status.persisted), (2, Some(2)));
}

#[tokio::test]
async fn acknowledged_entries_are_trimmed_but_never_one_pending_or_undelivered() {
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, _) = queued_sale(&app, 5).await;
    let stream = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap()).orders;
    let mut redis = app.redis.clone();
    let read = |consumer: &'static str| {
        let (mut redis, stream) = (redis.clone(), stream.clone());
        async move {
            let options = StreamReadOptions::default().group(CONSUMER_GROUP, consumer).count(2);
            let reply: StreamReadReply = redis.xread_options(&[&stream], &[">"], &options).await.unwrap();
            reply.keys[0].ids.iter().map(|e| e.id.clone()).collect::<Vec<String>>()
        }
    };
    let (first, second) = (read("c1").await, read("c2").await);
    fn ids(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    assert_eq!(order_stream::acknowledge(&mut redis, &stream, &ids(&second)).await.unwrap(), 2);
    let len: u64 = redis.xlen(&stream).await.unwrap();
    assert_eq!(len, 5, "c1's entries are pending: nothing after them goes either");

    assert_eq!(order_stream::acknowledge(&mut redis, &stream, &ids(&first)).await.unwrap(), 2);
    let left: redis::streams::StreamRangeReply = redis.xrange_all(&stream).await.unwrap();
    assert_eq!(left.ids.len(), 1, "the four acknowledged entries are gone");
    assert!(left.ids[0].id > second[1], "what is left is the entry never delivered");
    assert_eq!(order_stream::trim(&mut redis, &stream).await.unwrap(), 0, "nothing more to trim");
}

/// One `lua/trim.lua` call deletes at most 1,000 entries: a step that acknowledges more (2,500
/// purchases alone, an entry each) still leaves none of them behind, and the queue reads 0.
#[tokio::test]
async fn a_step_of_more_entries_than_one_trim_deletes_leaves_none_behind() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3_000).await;
    let keys = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap());
    let mut redis = app.redis.clone();
    for i in 0..2_500 {
        let mut call = seckill::redis::lua::BUY.key(&keys.all()[..]);
        call.arg(&sale).arg(format!("u{i}")).arg(Uuid::now_v7().to_string()).arg(1).arg("").arg("");
        let _: redis::Value = call.invoke_async(&mut redis).await.unwrap();
    }
    assert_eq!(redis.xlen::<_, usize>(&keys.orders).await.unwrap(), 2_500);
    let mut worker = app.manual_worker_batched("big", Duration::from_secs(60), 3_000);
    assert_eq!(worker.step().await.unwrap(), StepOutcome::Processed { entries: 2_500 });
    assert_eq!(redis.xlen::<_, usize>(&keys.orders).await.unwrap(), 0, "every acknowledged entry trimmed");
    let status = app.status(&sale).await;
    assert_eq!((status.sold, status.persisted, status.queued), (2_500, Some(2_500), 0));
}
