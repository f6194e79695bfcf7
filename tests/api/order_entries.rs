//! What a purchase appends to its sale's order stream, read back from Redis: the entry id carries
//! the purchase's time and the entry holds the order id and the buyer (then the payment deadline
//! and the trace context) from `lua/buy.lua`; a `lua/buy_batch.lua` call of several purchases
//! appends one entry for all of them, a line per order (issue 54). After an entry dated later
//! (the server's clock went back) the time goes in a field. Either way the orders the worker
//! decodes have the receipts' times.

use std::collections::BTreeSet;

use redis::AsyncCommands;
use redis::streams::{StreamId, StreamRangeReply};
use seckill::domain::SaleId;
use seckill::limiter::Algorithm;
use seckill::redis::connection::RedisConnection;
use seckill::redis::keys::SaleKeys;
use seckill::redis::order_stream::{self, CREATED_AT_MS, ORDERS, PAY_BY_MS, PURCHASE_FIELDS, TRACEPARENT};
use uuid::Uuid;

use crate::helpers::{TestApp, new_sale_id, spawn_app_with};

const TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// Seeds `body` and buys as alice (buy.lua, traces off), bob (buy.lua, traces on), then carol
/// (traces off) and dave (traces on) in one buy_batch.lua call. `before` runs after the seed.
async fn four_purchases(
    app: &TestApp,
    redis: &mut RedisConnection,
    body: serde_json::Value,
    before: impl AsyncFnOnce(&SaleKeys, &mut RedisConnection),
) -> (SaleId, SaleKeys) {
    let sale = SaleId::parse(&new_sale_id()).unwrap();
    let response = app.seed(sale.as_str(), body.clone()).await;
    assert_eq!(response.status(), 200, "{body}");
    let keys = SaleKeys::new(&app.config.key_prefix, &sale);
    before(&keys, redis).await;
    for (user, trace) in [("alice", ""), ("bob", TRACE)] {
        let mut call = seckill::redis::lua::BUY.key(&keys.all()[..]);
        call.arg(sale.as_str()).arg(user).arg(Uuid::now_v7().to_string()).arg(1).arg("").arg(trace);
        let reply: redis::Value = call.invoke_async(redis).await.unwrap();
        assert!(reply_is(&reply, "ok") || reply_is(&reply.as_sequence().unwrap()[0], "reserved"), "{user}: {reply:?}");
    }
    let mut call = Algorithm::SlidingLog.with_purchases().key(&keys.all()[..]);
    call.arg(sale.as_str()).arg(1).arg(2);
    for (user, trace) in [("carol", ""), ("dave", TRACE)] {
        call.arg(user).arg(Uuid::now_v7().to_string()).arg("").arg(trace).arg(1).arg("").arg(0);
    }
    let replies: Vec<redis::Value> = call.invoke_async(redis).await.unwrap();
    for reply in &replies {
        assert!(reply_is(reply, "ok") || reply_is(&reply.as_sequence().unwrap()[0], "reserved"), "{replies:?}");
    }
    (sale, keys)
}

fn reply_is(reply: &redis::Value, word: &str) -> bool {
    redis::from_redis_value_ref::<String>(reply).is_ok_and(|w| w == word)
}

/// The entries of the four buyers, each buyer with its receipt's order id and time: alice's and
/// bob's their own, carol's and dave's one for both (one call).
async fn entries(redis: &mut RedisConnection, keys: &SaleKeys) -> Vec<(String, StreamId, Uuid, i64)> {
    let all: StreamRangeReply = redis.xrange_all(&keys.orders).await.unwrap();
    let mut found = vec![];
    for entry in all.ids {
        for user in order_stream::users(&entry) {
            if !["alice", "bob", "carol", "dave"].contains(&user.as_str()) {
                continue;
            }
            let receipt: String = redis.hget(&keys.receipts, &user).await.unwrap();
            let words: Vec<&str> = receipt.split(' ').collect();
            assert_eq!(words.len(), 3, "{receipt}");
            assert_eq!(words[2], entry.id, "{user}'s receipt names its entry");
            found.push((user, entry.clone(), words[0].parse().unwrap(), words[1].parse().unwrap()));
        }
    }
    let users: Vec<&str> = found.iter().map(|(user, ..)| user.as_str()).collect();
    assert_eq!(users, ["alice", "bob", "carol", "dave"], "each buyer once, in order");
    assert_ne!(found[0].1.id, found[1].1.id, "alice and bob: an entry each");
    assert_eq!(found[2].1.id, found[3].1.id, "carol and dave: one entry");
    found
}

fn field_names(entry: &StreamId) -> BTreeSet<&str> {
    entry.map.keys().map(String::as_str).collect()
}

#[tokio::test]
async fn an_entry_holds_the_order_and_the_buyer_and_its_id_carries_the_time() {
    let app = spawn_app_with(|_| {}, false).await; // no worker: the entries stay
    let mut redis = app.redis.clone();
    for body in [serde_json::json!({"stock": 10}), serde_json::json!({"stock": 10, "payment_window": "1m"})] {
        let window = body.get("payment_window").is_some();
        let (sale, keys) = four_purchases(&app, &mut redis, body, async |_, _| {}).await;
        for (user, entry, order_id, created_at_ms) in entries(&mut redis, &keys).await {
            let shared = user == "carol" || user == "dave";
            let mut wanted: BTreeSet<&str> =
                if shared { [ORDERS].into() } else { PURCHASE_FIELDS.into_iter().collect() };
            if window {
                wanted.insert(PAY_BY_MS);
            }
            if user == "bob" {
                wanted.insert(TRACEPARENT);
            }
            if user == "bob" || user == "dave" {
                assert!(order_stream::traceparents(&entry).contains(&TRACE.to_owned()), "{user}'s trace");
            }
            assert_eq!(field_names(&entry), wanted, "{user}'s entry {entry:?}");
            let id_ms: i64 = entry.id.split_once('-').unwrap().0.parse().unwrap();
            assert_eq!(id_ms, created_at_ms, "{user}: the entry id carries the receipt's time");
            let orders = order_stream::decode(&entry, &sale).unwrap();
            let order = orders.iter().find(|order| order.user_id.as_str() == user).unwrap();
            assert_eq!((order.order_id, order.created_at_ms), (order_id, created_at_ms), "{user}");
            assert_eq!(order.pay_by_ms.is_some(), window, "{user}");
        }
    }
}

#[tokio::test]
async fn after_an_entry_dated_later_the_time_goes_in_a_field() {
    let app = spawn_app_with(|_| {}, false).await;
    let mut redis = app.redis.clone();
    // An entry an hour ahead, as if the server's clock had since gone back.
    let later =
        (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() + 3_600_000) as i64;
    let ahead = async |keys: &SaleKeys, redis: &mut RedisConnection| {
        let _: String =
            redis.xadd(&keys.orders, format!("{later}-0"), &[("order_id", "x"), ("user_id", "early")]).await.unwrap();
    };
    let (sale, keys) = four_purchases(&app, &mut redis, serde_json::json!({"stock": 10}), ahead).await;
    for (user, entry, order_id, created_at_ms) in entries(&mut redis, &keys).await {
        assert!(
            entry.id.starts_with(&format!("{later}-")),
            "{user}: Redis chose an id after the later entry: {}",
            entry.id
        );
        assert!(created_at_ms < later, "{user}: the receipt has the purchase's time, not the entry id's");
        assert!(field_names(&entry).contains(CREATED_AT_MS), "{user}'s entry {entry:?}");
        let orders = order_stream::decode(&entry, &sale).unwrap();
        let order = orders.iter().find(|order| order.user_id.as_str() == user).unwrap();
        assert_eq!(
            (order.order_id, order.created_at_ms),
            (order_id, created_at_ms),
            "{user}: the worker reads the field"
        );
    }
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 6, "four units sold");
}
