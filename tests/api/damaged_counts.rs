//! A figure a script changes with `HINCRBY` or `INCRBY` after its first write (a purchase's
//! `extra_units`, a release's stock and `extra_released`, a restock's `stock_initial` and stock)
//! that is not a canonical integer ("007", "-0", "5.0", 19 digits: a damaged key, which Redis's
//! increments refuse) is found before any write: the call fails with nothing written. Each used
//! to fail half-way, as Redis does not undo a script's writes: a purchase queued without its stock
//! taken, an order counted released with its units lost, `stock_initial` moved without the stock.

use redis::AsyncCommands;
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{ADMIN_TOKEN, TestApp, new_sale_id, spawn_app};
use seckill::domain::SaleId;
use seckill::redis::keys::SaleKeys;

/// What a canonical check must refuse (each passed the checks before: `^%d+$`, `tonumber`).
const DAMAGED: [&str; 4] = ["007", "5.0", " 5", "1234567890123456789"];

fn keys(app: &TestApp, sale: &str) -> SaleKeys {
    app.store.keyspace().sale_keys(&SaleId::parse(sale).unwrap())
}

/// The sale's stock, buyers, stream entries, receipts and released orders, as Redis holds them.
async fn written(app: &TestApp, keys: &SaleKeys) -> (Option<String>, usize, usize, usize, usize) {
    let mut redis = app.redis.clone();
    (
        redis.get(&keys.stock).await.unwrap(),
        redis.scard(&keys.buyers).await.unwrap(),
        redis.xlen(&keys.orders).await.unwrap(),
        redis.hlen(&keys.receipts).await.unwrap(),
        redis.scard(&keys.released).await.unwrap(),
    )
}

#[tokio::test]
async fn a_purchase_of_several_units_over_a_damaged_extra_units_writes_nothing() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 10, "per_buyer": 3})).await.status(), 200);
    let keys = keys(&app, &sale);
    let mut redis = app.redis.clone();
    let buy = |user: &'static str| {
        let body = json!({"sale_id": sale, "user_id": user, "quantity": 2});
        app.client.post(app.url("/buy")).json(&body).send()
    };
    let before = written(&app, &keys).await;
    for damaged in DAMAGED {
        let _: () = redis.hset(&keys.meta, "extra_units", damaged).await.unwrap();
        let refused = buy("ann").await.unwrap();
        assert!(refused.status().is_server_error(), "extra_units {damaged:?}: {}", refused.status());
        assert_eq!(written(&app, &keys).await, before, "extra_units {damaged:?}: nothing written");
    }
    let _: () = redis.hset(&keys.meta, "extra_units", "0").await.unwrap();
    assert_eq!(buy("ann").await.unwrap().status(), 201, "mended, the purchase goes through");
    let extra: i64 = redis.hget(&keys.meta, "extra_units").await.unwrap();
    assert_eq!((written(&app, &keys).await.0.as_deref(), extra), (Some("8"), 1));
}

#[tokio::test]
async fn a_release_over_a_damaged_stock_or_extra_released_counts_no_order_released() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 5})).await.status(), 200);
    let keys = keys(&app, &sale);
    let mut redis = app.redis.clone();
    let order = Uuid::now_v7().to_string();
    let release = |units: u32| {
        let mut call = seckill::redis::lua::RELEASE.key(&keys.stock);
        call.key(&keys.released).key(&keys.meta).arg(&order).arg(units);
        call
    };
    for damaged in DAMAGED {
        let _: () = redis.set(&keys.stock, damaged).await.unwrap();
        let failed: redis::RedisResult<redis::Value> = release(1).invoke_async(&mut redis).await;
        assert!(failed.is_err(), "stock {damaged:?}: {failed:?}");
        let counted: bool = redis.sismember(&keys.released, &order).await.unwrap();
        assert!(!counted, "stock {damaged:?}: the order is not counted released");
    }
    let _: () = redis.set(&keys.stock, 5).await.unwrap();
    for damaged in DAMAGED.iter().chain(&["-1", "-0"]) {
        let _: () = redis.hset(&keys.meta, "extra_released", damaged).await.unwrap();
        let failed: redis::RedisResult<redis::Value> = release(2).invoke_async(&mut redis).await;
        assert!(failed.is_err(), "extra_released {damaged:?}: {failed:?}");
        let counted: bool = redis.sismember(&keys.released, &order).await.unwrap();
        assert!(!counted, "extra_released {damaged:?}: the order is not counted released");
    }
    let _: () = redis.hset(&keys.meta, "extra_released", "0").await.unwrap();
    let (released, stock_before, units): (i64, i64, i64) = release(2).invoke_async(&mut redis).await.unwrap();
    assert_eq!((released, stock_before, units), (1, 5, 2), "mended, the release gives its units back once");
    let (stock, extra): (i64, i64) =
        (redis.get(&keys.stock).await.unwrap(), redis.hget(&keys.meta, "extra_released").await.unwrap());
    assert_eq!((stock, extra), (7, 1));
}

#[tokio::test]
async fn a_restock_over_a_damaged_figure_changes_nothing_and_records_no_change() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 5})).await.status(), 200);
    let keys = keys(&app, &sale);
    let mut redis = app.redis.clone();
    let restock = || {
        let url = app.url(&format!("/admin/sales/{sale}/stock"));
        app.client.post(url).bearer_auth(ADMIN_TOKEN).json(&json!({"add": 3})).send()
    };
    for damaged in DAMAGED {
        let _: () = redis.set(&keys.stock, damaged).await.unwrap();
        let refused = restock().await.unwrap();
        assert!(refused.status().is_server_error(), "stock {damaged:?}: {}", refused.status());
        let (initial, op): (i64, Option<String>) = redis::cmd("HMGET")
            .arg(&keys.meta)
            .arg(&["stock_initial", "restock_op"])
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!((initial, op), (5, None), "stock {damaged:?}: stock_initial unmoved, no change recorded");
    }
    let _: () = redis.set(&keys.stock, 5).await.unwrap();
    let _: () = redis.hset(&keys.meta, "stock_initial", "05").await.unwrap();
    assert!(restock().await.unwrap().status().is_server_error(), "a damaged stock_initial");
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 5, "the stock unmoved");
    let _: () = redis.hset(&keys.meta, "stock_initial", 5).await.unwrap();
    assert_eq!(restock().await.unwrap().status(), 200, "mended, the restock goes through");
    let (initial, stock): (i64, i64) =
        (redis.hget(&keys.meta, "stock_initial").await.unwrap(), redis.get(&keys.stock).await.unwrap());
    assert_eq!((initial, stock), (8, 8));
}

#[tokio::test]
async fn a_drop_restock_over_one_damaged_size_changes_no_size() {
    let app = spawn_app().await;
    let drop = format!("d{}", Uuid::now_v7().simple());
    let url = app.url(&format!("/admin/drops/{drop}"));
    let sizes = json!({"sizes": {"40": {"stock": 2}, "41": {"stock": 2}}});
    let seeded = app.client.put(url.clone()).bearer_auth(ADMIN_TOKEN).json(&sizes).send().await.unwrap();
    assert_eq!(seeded.status(), 200);
    let (forty, forty_one) = (keys(&app, &format!("{drop}.40")), keys(&app, &format!("{drop}.41")));
    let mut redis = app.redis.clone();
    let restock = || {
        let body = json!({"add": {"40": 1, "41": 1}});
        app.client.post(format!("{url}/stock")).bearer_auth(ADMIN_TOKEN).json(&body).send()
    };
    for damaged in DAMAGED {
        let _: () = redis.set(&forty_one.stock, damaged).await.unwrap();
        let refused = restock().await.unwrap();
        assert!(refused.status().is_server_error(), "size 41's stock {damaged:?}: {}", refused.status());
        let mut figures = Vec::new();
        for keys in [&forty, &forty_one] {
            let initial: i64 = redis.hget(&keys.meta, "stock_initial").await.unwrap();
            let stock: String = redis.get(&keys.stock).await.unwrap();
            figures.push((initial, stock));
        }
        assert_eq!(
            figures,
            [(2, "2".to_owned()), (2, damaged.to_owned())],
            "size 41's stock {damaged:?}: no size moved"
        );
    }
}

/// Reconciliation's repair (`lua/restore.lua`) adds a page of buyers and lowers the stock once at
/// the end. A count it raises for a multi-unit order (`extra_units`, `extra_released`) that
/// `HINCRBY` refuses, or a receipts key of the wrong type, used to fail it after the page's first
/// buyers were added and before the stock was lowered; the next repair skipped them as known, and
/// the sale sold their units again. Now the page fails with nothing written.
#[tokio::test]
async fn a_restore_over_a_damaged_count_or_key_adds_no_buyer() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 5, "per_buyer": 2})).await.status(), 200);
    let keys = keys(&app, &sale);
    let mut redis = app.redis.clone();
    let at = "1732363200000";
    let (ann, bob, cat) = (Uuid::now_v7().to_string(), Uuid::now_v7().to_string(), Uuid::now_v7().to_string());
    let restore = || {
        let mut call = seckill::redis::lua::RESTORE.key(&keys.stock);
        call.key(&keys.buyers).key(&keys.receipts).key(&keys.released).key(&keys.meta);
        // ann 1 unit, bob 2, cat 2 released in Postgres: each count is raised after ann is added.
        for (user, order, released, units) in [("ann", &ann, 0, 1), ("bob", &bob, 0, 2), ("cat", &cat, 1, 2)] {
            call.arg(user).arg(order).arg(at).arg(released).arg(units);
        }
        call
    };
    let before = written(&app, &keys).await;
    for (field, damaged) in DAMAGED.iter().map(|d| ("extra_units", *d)).chain(DAMAGED.map(|d| ("extra_released", d))) {
        let _: () = redis.hset(&keys.meta, field, damaged).await.unwrap();
        let failed: redis::RedisResult<redis::Value> = restore().invoke_async(&mut redis).await;
        assert!(failed.is_err(), "{field} {damaged:?}: {failed:?}");
        assert_eq!(written(&app, &keys).await, before, "{field} {damaged:?}: nothing written");
        let _: () = redis.hset(&keys.meta, field, "0").await.unwrap();
    }
    let _: () = redis.set(&keys.receipts, "not a hash").await.unwrap();
    let failed: redis::RedisResult<redis::Value> = restore().invoke_async(&mut redis).await;
    assert!(failed.is_err(), "receipts of the wrong type: {failed:?}");
    let (stock, buyers): (String, usize) =
        (redis.get(&keys.stock).await.unwrap(), redis.scard(&keys.buyers).await.unwrap());
    assert_eq!((stock.as_str(), buyers), ("5", 0), "receipts of the wrong type: nothing written");

    let _: () = redis.del(&keys.receipts).await.unwrap();
    let (restored, overdrawn, released): (i64, i64, i64) = restore().invoke_async(&mut redis).await.unwrap();
    assert_eq!((restored, overdrawn, released), (3, 0, 1), "mended, the page is restored");
    let (stock, buyers): (i64, usize) =
        (redis.get(&keys.stock).await.unwrap(), redis.scard(&keys.buyers).await.unwrap());
    assert_eq!((stock, buyers), (2, 3), "ann's and bob's 3 units taken, cat's released order none");
}
