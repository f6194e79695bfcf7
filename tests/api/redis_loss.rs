//! A Redis loss never oversells and never breaks a 201: Postgres remembers what Redis forgot. A
//! seed of a sale whose orders Redis lost is refused (409 `sale_has_orders`), and
//! reconciliation's repair restores the sale and its buyers from Postgres.

use std::collections::BTreeSet;

use redis::AsyncCommands;
use seckill::domain::SaleId;
use seckill::reconcile::ReconcileReport;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, new_sale_id, spawn_app};

/// Buys as `user`, asserting 201; the order id.
async fn buy(app: &TestApp, sale: &str, user: &str) -> Uuid {
    let response = app.buy(sale, user).await;
    assert_eq!(response.status(), 201, "{user} buys");
    let body: Value = response.json().await.unwrap();
    body["order_id"].as_str().unwrap().parse().unwrap()
}

/// The order id a repeat purchase names in its 409.
async fn repeat(app: &TestApp, sale: &str, user: &str) -> Uuid {
    let response = app.buy(sale, user).await;
    assert_eq!(response.status(), 409, "{user} buys again");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "already_purchased", "{body}");
    body["order_id"].as_str().unwrap_or_else(|| panic!("no order id: {body}")).parse().unwrap()
}

pub(crate) async fn repair(app: &TestApp, sale: &str) -> ReconcileReport {
    let url = app.url(&format!("/admin/sales/{sale}/reconcile"));
    let response = app.client.post(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 200, "repair {sale}");
    response.json().await.unwrap()
}

/// Every key of the sale, gone: what an operator's clean-up, an eviction or a failover to an
/// empty replica leaves.
pub(crate) async fn lose_sale(app: &TestApp, sale: &str) {
    let keys = app.store.keyspace().sale_keys(&SaleId::parse(sale).unwrap());
    let mut con = app.store.keyspace().conn();
    for key in keys.all() {
        let _: i64 = con.del(key).await.unwrap();
    }
    assert_eq!(app.store.sale_state(&SaleId::parse(sale).unwrap()).await.unwrap(), None, "the sale is lost");
}

/// A sale of `stock` sold to `users`, drained into Postgres: their order ids by user.
async fn sold_and_drained(app: &TestApp, stock: i64, users: &[&str]) -> (String, Vec<Uuid>) {
    let sale = new_sale_id();
    app.seed_stock(&sale, stock).await;
    let mut ids = Vec::new();
    for user in users {
        ids.push(buy(app, &sale, user).await);
    }
    app.wait_for_drain(&sale).await;
    (sale, ids)
}

/// `user`'s purchase of one unit as Redis forgets it (a restart within its fsync interval, a
/// failover): out of the buyer set and the receipts, its unit back in the stock.
async fn forget_purchase(app: &TestApp, sale: &str, user: &str) {
    let keys = app.store.keyspace().sale_keys(&SaleId::parse(sale).unwrap());
    let _: () = redis::pipe()
        .srem(&keys.buyers, user)
        .ignore()
        .hdel(&keys.receipts, user)
        .ignore()
        .incr(&keys.stock, 1)
        .ignore()
        .query_async(&mut app.store.keyspace().conn())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_lost_sale_is_never_seeded_again_over_its_orders_and_the_repair_restores_it() {
    let app = spawn_app().await;
    let (sale, ids) = sold_and_drained(&app, 3, &["a", "b", "c"]).await;
    lose_sale(&app, &sale).await;

    assert_error(app.seed(&sale, json!({"stock": 3})).await, 409, "sale_has_orders").await;
    assert_ne!(app.buy(&sale, "a").await.status(), 201, "nothing is sold while the sale is lost");

    let report = repair(&app, &sale).await;
    assert!(report.sale_restored, "{report:?}");
    assert_eq!(report.buyers_restored, 3, "{report:?}");
    assert_eq!(report.unknown_to_redis, ["a", "b", "c"], "{report:?}");
    assert!(report.resolved(), "{report:?}");

    let status = app.status(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold), (3, 0, 3), "{status:?}");
    for (user, id) in ["a", "b", "c"].into_iter().zip(&ids) {
        assert_eq!(repeat(&app, &sale, user).await, *id, "{user} is told its first order");
    }
    assert_error(app.buy(&sale, "d").await, 410, "sold_out").await;
    let confirmed: BTreeSet<Uuid> = ids.into_iter().collect();
    app.assert_invariants(&sale, &confirmed).await;
    assert_eq!(app.order_ids(&sale).await, confirmed, "3 orders for a stock of 3, each a 201");
}

#[tokio::test]
async fn buyers_redis_forgot_in_its_last_second_are_restored_before_they_can_buy_twice() {
    let app = spawn_app().await;
    let (sale, ids) = sold_and_drained(&app, 5, &["a", "b", "c"]).await;
    // What an AOF everysec restart can leave: c's purchase reached Postgres, its Redis writes
    // did not survive.
    forget_purchase(&app, &sale, "c").await;

    let report = repair(&app, &sale).await;
    assert_eq!((report.unknown_to_redis.as_slice(), report.buyers_restored), (["c".to_owned()].as_slice(), 1));
    assert!(!report.sale_restored && report.resolved(), "{report:?}");
    assert_eq!(repeat(&app, &sale, "c").await, ids[2], "c cannot buy twice");

    let mut confirmed: BTreeSet<Uuid> = ids.into_iter().collect();
    confirmed.insert(buy(&app, &sale, "d").await);
    confirmed.insert(buy(&app, &sale, "e").await);
    assert_error(app.buy(&sale, "f").await, 410, "sold_out").await;
    app.wait_for_drain(&sale).await;
    let status = app.assert_invariants(&sale, &confirmed).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold), (5, 0, 5), "{status:?}");
    let check = repair(&app, &sale).await;
    assert!(check.consistent && check.buyers_restored == 0, "a second repair has nothing to do: {check:?}");
}

/// A buyer whose purchase Redis lost (c's writes, as above) cancels before the repair: the
/// release reaches Redis and gives c's unit to a stock that never lost it, and Redis still
/// balances. The repair restores c and takes the unit back: the sale sells its stock, not one more.
#[tokio::test]
async fn a_release_that_reached_redis_after_its_purchase_was_lost_is_not_a_unit_sold_twice() {
    let app = spawn_app().await;
    let sale = crate::reservations::seed_window(&app, 5, "5m").await;
    for user in ["a", "b", "c"] {
        crate::reservations::reserve(&app, &sale, user).await;
    }
    app.wait_for_drain(&sale).await;
    forget_purchase(&app, &sale, "c").await;
    assert_eq!(app.cancel(&sale, "c").await.status(), 200, "c cancels");
    wait_restocked(&app, &sale, "c").await;
    assert_eq!(app.status(&sale).await.stock_left, 4, "the release gave c's unit to a stock that had it");

    let report = repair(&app, &sale).await;
    assert_eq!((report.unknown_to_redis.as_slice(), report.buyers_restored), (["c".to_owned()].as_slice(), 1));
    let (status, standings) = app.assert_released(&sale, std::time::Duration::from_secs(30)).await;
    assert_eq!((status.stock_left, standings.reserved, standings.cancelled), (3, 2, 1), "{status:?}");
    for user in ["d", "e", "f"] {
        crate::reservations::reserve(&app, &sale, user).await;
    }
    assert_error(app.buy(&sale, "g").await, 410, "sold_out").await;
    let (status, standings) = app.assert_released(&sale, std::time::Duration::from_secs(30)).await;
    assert_eq!((status.stock_left, standings.reserved), (0, 5), "five reservations for a stock of 5: {status:?}");
}

/// Waits until `user`'s order in `sale` is recorded as given back (`restocked_at`).
async fn wait_restocked(app: &TestApp, sale: &str, user: &str) {
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let restocked: bool =
            sqlx::query_scalar("select restocked_at is not null from orders where sale_id = $1 and user_id = $2")
                .bind(sale)
                .bind(user)
                .fetch_one(&app.pool)
                .await
                .unwrap();
        if restocked {
            return;
        }
        assert!(tokio::time::Instant::now() < until, "{user}'s release never recorded");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A lost sale with a cancelled order: its released set is lost with it, so the check counts the
/// release lost; the repair restores its buyer with the order in the released set (the new stock
/// never lost its unit), and says it resolved everything, as the check after it confirms.
#[tokio::test]
async fn the_repair_of_a_lost_sale_with_a_release_says_it_resolved_it() {
    let app = spawn_app().await;
    let sale = crate::reservations::seed_window(&app, 5, "5m").await;
    for user in ["a", "b"] {
        crate::reservations::reserve(&app, &sale, user).await;
    }
    app.wait_for_drain(&sale).await;
    assert_eq!(app.cancel(&sale, "a").await.status(), 200, "a cancels");
    wait_restocked(&app, &sale, "a").await;
    lose_sale(&app, &sale).await;
    // All of it, the released set too.
    let released = app.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap()).released;
    let _: i64 = app.store.keyspace().conn().del(released).await.unwrap();

    let report = repair(&app, &sale).await;
    assert!(report.sale_restored, "{report:?}");
    assert_eq!((report.releases_lost, report.releases_restored, report.buyers_restored), (1, 1, 2), "{report:?}");
    assert!(report.resolved(), "nothing is left to fix: {report:?}");
    let (status, standings) = app.assert_released(&sale, std::time::Duration::from_secs(30)).await;
    assert_eq!((status.stock_left, standings.reserved, standings.cancelled), (4, 1, 1), "{status:?}");
    let check = crate::reconcile::reconcile(&app, &sale, false).await;
    assert!(check.consistent, "{check:?}");
}

#[tokio::test]
async fn a_seed_over_buyers_redis_still_knows_is_still_sale_in_progress() {
    let app = spawn_app().await;
    let (sale, _) = sold_and_drained(&app, 3, &["a"]).await;
    assert_error(app.seed(&sale, json!({"stock": 3})).await, 409, "sale_in_progress").await;
    assert_eq!(app.sales_row_stock(&sale).await, 3, "nothing changed");
}

#[tokio::test]
async fn a_restore_beyond_the_stock_is_reported_overdrawn_and_never_drives_stock_negative() {
    let app = spawn_app().await;
    let (sale, _) = sold_and_drained(&app, 2, &["a", "b"]).await;
    sqlx::query("insert into orders (order_id, sale_id, user_id, created_at) values ($1, $2, 'ghost', now())")
        .bind(Uuid::now_v7())
        .bind(&sale)
        .execute(&app.pool)
        .await
        .unwrap();

    let report = repair(&app, &sale).await;
    assert_eq!((report.buyers_restored, report.overdrawn), (1, 1), "{report:?}");
    assert!(!report.resolved(), "Postgres holds more orders than the stock: {report:?}");
    let status = app.status(&sale).await;
    assert_eq!((status.stock_left, status.sold), (0, 3), "stock stops at 0: {status:?}");
}

/// A release Postgres owes (a sweeper's re-drive, a cancel) waits while the repair restores a
/// lost sale: on the sale seeded again it would give back units the new stock never lost, before
/// the restore counted the order released. Held, it gives nothing back and stays owed; once the
/// repair lifted its hold, the restored gate holds it to nothing.
#[tokio::test]
async fn a_release_waits_while_the_repair_restores_and_gives_back_nothing_twice() {
    use seckill::redis::keys::SaleKeys;
    use seckill::redis::lua::{RELEASE, RESTORE};
    let app = spawn_app().await;
    let sale = new_sale_id();
    let id = SaleId::parse(&sale).unwrap();
    app.store.seed(&id, held_spec(5)).await.unwrap(); // as the repair seeds a lost sale
    let keys = SaleKeys::new(&app.config.key_prefix, &id);
    let mut redis = app.redis.clone();
    let (cancelled, live) = (Uuid::now_v7(), Uuid::now_v7());
    let mut release = RELEASE.key(&keys.stock);
    release.key(&keys.released).key(&keys.meta).arg(cancelled.to_string()).arg(2);
    let held: String = release.invoke_async(&mut redis).await.unwrap();
    assert_eq!(held, "unknown_sale", "held: owed, nothing given back");

    let mut restore = RESTORE.key(&keys.stock);
    restore.key(&keys.buyers).key(&keys.receipts).key(&keys.released).key(&keys.meta);
    restore.arg("a").arg(cancelled.to_string()).arg(1_732_363_200_000_i64).arg("1").arg(2);
    restore.arg("b").arg(live.to_string()).arg(1_732_363_200_001_i64).arg("0").arg(1);
    let (restored, overdrawn, released): (i64, i64, i64) = restore.invoke_async(&mut redis).await.unwrap();
    assert_eq!((restored, overdrawn, released), (2, 0, 1));
    seckill::controls::lift_hold(&app.store, &id, seckill::reconcile::REPAIR_HOLD).await.unwrap();
    let (released, _, units): (i64, i64, i64) = release.invoke_async(&mut redis).await.unwrap();
    assert_eq!((released, units), (0, 0), "the restore counted it released: the gate is closed");

    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    let (buyers, gone): (i64, i64) =
        (redis.scard(&keys.buyers).await.unwrap(), redis.scard(&keys.released).await.unwrap());
    let extra: (Option<i64>, Option<i64>) = redis::cmd("HMGET")
        .arg(&keys.meta)
        .arg("extra_units")
        .arg("extra_released")
        .query_async(&mut redis)
        .await
        .unwrap();
    let (extra_units, extra_released) = (extra.0.unwrap_or(0), extra.1.unwrap_or(0));
    // stock_initial = stock + buyers + extra_units - released - extra_released; only b's unit sold.
    assert_eq!((stock, buyers, extra_units, gone, extra_released), (4, 2, 1, 1, 1));
    assert_eq!(stock + buyers + extra_units - gone - extra_released, 5, "the stock balances");
}

/// A stock change while the repair restores a lost sale (seeded again and held, its buyers not yet
/// back, as a repair that stopped half-way leaves it) is refused: the stock still counts the
/// buyers' units as unsold, so taking 4 of 5 back passed, and the restore then overdrew the sale.
#[tokio::test]
async fn a_stock_change_waits_until_the_repair_has_restored_the_buyers() {
    let app = spawn_app().await;
    let (sale, _) = sold_and_drained(&app, 5, &["a", "b", "c"]).await;
    lose_sale(&app, &sale).await;
    app.store.seed(&SaleId::parse(&sale).unwrap(), held_spec(5)).await.unwrap();
    let url = app.url(&format!("/admin/sales/{sale}/stock"));
    let take_back = || app.client.post(&url).bearer_auth(ADMIN_TOKEN).json(&json!({"add": -4}));
    assert_error(take_back().send().await.unwrap(), 409, "sale_restoring").await;
    assert_eq!(app.sales_row_stock(&sale).await, 5, "nothing changed");

    let report = repair(&app, &sale).await;
    assert!(report.resolved() && report.overdrawn == 0, "{report:?}");
    assert_error(take_back().send().await.unwrap(), 409, "stock_below_zero").await;
    let status = app.status(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold), (5, 2, 3), "{status:?}");
}

/// A sale of `stock` seeded as the repair seeds a lost sale: held until the repair ends.
fn held_spec(stock: i64) -> seckill::purchase::SaleSpec {
    seckill::purchase::SaleSpec {
        stock,
        starts_at_ms: None,
        ends_at_ms: None,
        shards: None,
        payment_window_ms: None,
        queue: None,
        per_buyer: 1,
        challenge_cost: None,
        hold: Some(seckill::reconcile::REPAIR_HOLD),
    }
}

/// A group's units held per buyer are one key for all its sales: lost with them, they come back
/// once, at what Postgres holds over the group, however many of its sales are repaired one after
/// the other (each repair's restore used to add its sale's units again).
#[tokio::test]
async fn a_buyers_units_held_in_a_group_come_back_once_over_repairs_of_several_sales() {
    let app = spawn_app().await;
    let group = new_sale_id();
    let [a, b, c] = ["a", "b", "c"].map(|size| format!("{group}.{size}"));
    for sale in [&a, &b, &c] {
        assert_eq!(app.seed(sale, json!({"stock": 5, "per_buyer": 3})).await.status(), 200, "{sale}");
    }
    buy(&app, &a, "u").await;
    buy(&app, &b, "u").await;
    app.wait_for_drain(&a).await;
    app.wait_for_drain(&b).await;
    let held = app.store.keyspace().sale_keys(&SaleId::parse(&a).unwrap()).held;
    lose_sale(&app, &a).await;
    lose_sale(&app, &b).await;
    let _: i64 = app.store.keyspace().conn().del(&held).await.unwrap();

    assert!(repair(&app, &a).await.sale_restored);
    assert!(repair(&app, &b).await.sale_restored);
    let units: Option<i64> = app.store.keyspace().conn().hget(&held, "u").await.unwrap();
    assert_eq!(units, Some(2), "a unit in each of two sales");
    buy(&app, &c, "u").await; // the third of the three a buyer may hold in the group
    let body = json!({"sale_id": c, "user_id": "v", "quantity": 3});
    assert_eq!(app.client.post(app.url("/buy")).json(&body).send().await.unwrap().status(), 201, "another buyer's");
}

/// The repair seeds a lost sale paused and resumes it only once the buyers Postgres holds are
/// back: in between, a purchase is refused `sale_paused`, not sold over their orders. A repair
/// that stopped after its seed (here: the seed made as the repair makes it, no more) leaves the
/// sale paused, and the next repair finishes the job and lifts the pause; an operator's pause
/// with another reason is not lifted.
#[tokio::test]
async fn a_lost_sale_stays_paused_until_the_repair_has_put_its_buyers_back() {
    let app = spawn_app().await;
    let (sale, ids) = sold_and_drained(&app, 3, &["a", "b"]).await;
    lose_sale(&app, &sale).await;
    app.store.seed(&SaleId::parse(&sale).unwrap(), held_spec(3)).await.unwrap();
    // An operator's resume does not lift the repair's hold.
    let resume = app.client.post(app.url(&format!("/admin/sales/{sale}/resume"))).bearer_auth(ADMIN_TOKEN);
    assert_eq!(resume.send().await.unwrap().status(), 200);
    for user in ["a", "c"] {
        assert_error(app.buy(&sale, user).await, 403, "sale_paused").await;
    }
    let status = app.client.get(app.url(&format!("/admin/sales/{sale}"))).bearer_auth(ADMIN_TOKEN).send().await;
    let status: Value = status.unwrap().json().await.unwrap();
    let held = (&json!(true), &json!(seckill::reconcile::REPAIR_HOLD));
    assert_eq!((&status["paused"], &status["paused_reason"]), held, "resumed, still held: {status}");

    let report = repair(&app, &sale).await;
    assert_eq!(report.buyers_restored, 2, "{report:?}");
    assert_eq!(repeat(&app, &sale, "a").await, ids[0], "a is told its order");
    let c = buy(&app, &sale, "c").await; // the last unit, once the repair is done
    assert_error(app.buy(&sale, "d").await, 410, "sold_out").await;
    app.wait_for_drain(&sale).await;
    let confirmed: BTreeSet<Uuid> = ids.into_iter().chain([c]).collect();
    app.assert_invariants(&sale, &confirmed).await;

    let pause = app.client.post(app.url(&format!("/admin/sales/{sale}/pause"))).bearer_auth(ADMIN_TOKEN);
    assert_eq!(pause.json(&json!({"reason": "price typo"})).send().await.unwrap().status(), 200);
    repair(&app, &sale).await;
    let status = app.client.get(app.url(&format!("/admin/sales/{sale}"))).bearer_auth(ADMIN_TOKEN).send().await;
    let status: Value = status.unwrap().json().await.unwrap();
    assert_eq!((&status["paused"], &status["paused_reason"]), (&json!(true), &json!("price typo")), "{status}");
}

/// A drop's size the repair writes back is held as a lost sale is (lua/drop_seed.lua's restore
/// mode with the hold): purchases refused, until the hold is lifted.
#[tokio::test]
async fn a_drops_size_written_back_is_held_until_the_repair_lifts_it() {
    use seckill::domain::DropId;
    let app = spawn_app().await;
    let drop = new_sale_id();
    let body = json!({"sizes": {"40": {"stock": 2}, "41": {"stock": 2}}});
    let put = app.client.put(app.url(&format!("/admin/drops/{drop}"))).bearer_auth(ADMIN_TOKEN).json(&body);
    assert_eq!(put.send().await.unwrap().status(), 200);
    let size = format!("{drop}.40");
    lose_sale(&app, &size).await;
    let spec = seckill::drops::DropSpec {
        sizes: vec![(SaleId::parse(&size).unwrap(), 2)],
        starts_at_ms: None,
        ends_at_ms: None,
        payment_window_ms: None,
        per_buyer: 1,
        challenge_cost: None,
        line: None,
        draw: None,
    };
    let drop_id = DropId::parse(&drop).unwrap();
    let hold = seckill::reconcile::REPAIR_HOLD;
    assert_eq!(seckill::drops::restore(&app.store, &drop_id, &spec, 4, hold).await.unwrap(), 1, "written back");
    assert_error(app.buy(&size, "a").await, 403, "sale_paused").await;
    assert_eq!(app.buy(&format!("{drop}.41"), "b").await.status(), 201, "the size Redis kept sells");
    seckill::controls::lift_hold(&app.store, &SaleId::parse(&size).unwrap(), hold).await.unwrap();
    assert_eq!(app.buy(&size, "a").await.status(), 201, "lifted");
}

/// A queued sale Redis lost, seeded again, keeps the shuffle seed Postgres keeps: Redis drew the
/// new seed's while the row kept the first, so the two disagreed, and a repair would later have
/// shuffled the line with the row's.
#[tokio::test]
async fn a_queued_sale_seeded_again_after_a_loss_keeps_the_seed_postgres_keeps() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    let at = |seconds: i64| {
        let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(seconds);
        at.format(&time::format_description::well_known::Rfc3339).unwrap()
    };
    let body = json!({"stock": 3, "starts_at": at(3600), "queue": {"opens_at": at(-1), "rate": 10}});
    assert_eq!(app.seed(&sale, body.clone()).await.status(), 200);
    let keys = app.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap());
    let state = keys.queue.state.clone();
    let seeds = async || -> (String, String) {
        let redis: String = app.redis.clone().hget(&state, "seed").await.unwrap();
        let row: String = sqlx::query_scalar("select encode(queue_seed, 'hex') from sales where sale_id = $1")
            .bind(&sale)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        (redis, row)
    };
    let (first, row) = seeds().await;
    assert_eq!(first, row);
    lose_sale(&app, &sale).await;
    let _: i64 = app.redis.clone().del(&state).await.unwrap(); // its line's state too
    assert_eq!(app.seed(&sale, body).await.status(), 200);
    assert_eq!(seeds().await, (first.clone(), first), "Redis's seed, then the row's");
}
