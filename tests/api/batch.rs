//! Several purchases in one call (`lua/buy_batch.lua`, `seckill::purchase::batch`): purchases that
//! queue up for a shard go together, and each keeps its own limits, order and verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use redis::{AsyncCommands, Value};
use seckill::domain::SaleId;
use seckill::limiter::{Algorithm, Policy, RateLimit};
use seckill::redis::keys::{SaleKeys, hash_tag};
use uuid::Uuid;

use crate::helpers::{new_sale_id, redis_url, spawn_app, spawn_app_with};

/// A Prometheus sample's value in `text` (0 when absent).
fn sample(text: &str, name: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purchases_that_queue_up_share_calls_and_each_keeps_its_own_verdict() {
    // Both limits on (each purchase carries two limiter keys), one client address for all.
    let app = spawn_app_with(|config| config.edge.max_connections_per_client = 0, true).await;
    let sale = new_sale_id();
    let stock = 150;
    app.seed_stock(&sale, stock).await;

    // 500 buyers, 100 of whom ask twice at the same time.
    let users: Vec<String> = (0..500).chain(0..100).map(|i| format!("user-{i}")).collect();
    let responses = join_all(users.iter().map(|user| {
        let (app, sale) = (&app, &sale);
        async move {
            let response = app.buy(sale, user).await;
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap();
            (user.clone(), status, body)
        }
    }))
    .await;

    let mut won: BTreeMap<String, Uuid> = BTreeMap::new();
    for (user, status, body) in &responses {
        if *status == 201 {
            let order: Uuid = body["order_id"].as_str().unwrap().parse().unwrap();
            assert!(won.insert(user.clone(), order).is_none(), "{user} bought twice");
        }
    }
    for (user, status, body) in &responses {
        match status {
            201 => {}
            409 => {
                assert_eq!(body["error"], "already_purchased", "{user}: {body}");
                let order = body["order_id"].as_str().map(|o| o.parse::<Uuid>().unwrap());
                assert_eq!(order.as_ref(), won.get(user), "{user} is told the order it won: {body}");
            }
            410 => assert_eq!(body["error"], "sold_out", "{user}: {body}"),
            other => panic!("{user}: {other} {body}"),
        }
    }
    assert_eq!(won.len(), stock as usize, "exactly the stock is sold");
    let created: BTreeSet<Uuid> = won.values().copied().collect();
    let status = app.assert_invariants(&sale, &created).await;
    assert_eq!((status.stock_left, status.sold, status.persisted), (0, stock, Some(stock)));

    // Every purchase that reached Redis went in a call; some calls carried several.
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let calls = sample(&text, "seckill_purchase_batch_size_count");
    let purchases = sample(&text, "seckill_purchase_batch_size_sum");
    assert!(purchases >= stock as f64 && purchases <= users.len() as f64, "{purchases} purchases sent");
    assert!(calls < purchases, "{calls} calls for {purchases} purchases: none went together");
    // The worker's batch sizes count orders, though a call's orders share one stream entry (it
    // counts a batch just after its commit, which the invariants saw: wait for it).
    let mut batched = 0.0;
    for _ in 0..200 {
        let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        batched = sample(&text, "seckill_worker_batch_size_sum");
        if batched >= stock as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(batched, stock as f64, "the worker's batches hold every order once");
}

#[tokio::test]
async fn with_a_batch_of_one_each_purchase_goes_alone() {
    let app = spawn_app_with(|config| config.purchase_batch = 1, true).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 20).await;
    let statuses = join_all((0..40).map(|i| {
        let (app, sale) = (&app, &sale);
        async move { app.buy(sale, &format!("u{i}")).await.status().as_u16() }
    }))
    .await;
    assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 20);
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(sample(&text, "seckill_purchase_batch_size_count"), 0.0, "no call went through the batcher");
    app.wait_for_drain(&sale).await;
}

/// A sale of 10 seeded for calling the purchase scripts directly: its id, keys, hash tag, and a
/// connection of the test's own.
async fn for_direct_calls(
    app: &crate::helpers::TestApp,
) -> (String, SaleKeys, String, seckill::redis::connection::RedisConnection) {
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;
    let keys = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap());
    let tag = hash_tag(&keys.meta).to_owned();
    let redis = seckill::redis::connection::connect(&redis_url().into(), Duration::from_secs(5)).unwrap();
    (sale, keys, tag, redis)
}

/// The script's contract, called directly: a part that raises an error (its limiter key is of
/// another type) writes nothing and leaves the purchases before and after it standing; a buyer
/// twice in one call is refused the second time with the first order; a part without limits
/// answers buy.lua's reply; every limit is decided at the call's own time.
#[tokio::test]
async fn one_failing_purchase_in_a_call_leaves_the_others_standing() {
    let app = spawn_app_with(|_| {}, false).await; // no worker: the entry stays in the stream
    let (sale, keys, tag, mut redis) = for_direct_calls(&app).await;
    let (good, damaged) = (format!("t:{{{tag}}}:limit:good"), format!("t:{{{tag}}}:limit:damaged"));
    let _: () = redis.set(&damaged, "not a sorted set").await.unwrap();

    let policy =
        Policy::new(Algorithm::SlidingLog, RateLimit { limit: 5, window: Duration::from_secs(10) }, None).unwrap();
    let orders: Vec<String> = (0..4).map(|_| Uuid::now_v7().to_string()).collect();
    // (user, order, limiter key or none)
    let parts = [
        ("alice", &orders[0], Some(&good)),
        ("bob", &orders[1], Some(&damaged)),
        ("alice", &orders[2], Some(&good)),
        ("carol", &orders[3], None),
    ];
    let mut call = Algorithm::SlidingLog.with_purchases().key(&keys.all()[..]);
    call.arg(&sale).arg(1).arg(parts.len());
    for (user, order, limiter) in &parts {
        call.arg(*user).arg(order.as_str()).arg("").arg("").arg(1).arg("").arg(limiter.map_or(0, |_| 1));
        if let Some(key) = limiter {
            call.key(key.as_str());
            policy.push_args(&mut call, order, None);
        }
    }
    let replies: Vec<Value> = call.invoke_async(&mut redis).await.unwrap();
    // Every limit of the call decided at the call's one reading of Redis TIME (the limiter's
    // ARGV[6]), the one the orders carry: alice's two requests are logged at the same microsecond.
    let logged: Vec<(String, u64)> = redis.zrange_withscores(&good, 0, -1).await.unwrap();
    let _: () = redis.del(&[&good, &damaged]).await.unwrap();
    assert_eq!(replies.len(), 4, "{replies:?}");
    let receipt: String = redis.hget(&keys.receipts, "alice").await.unwrap();
    let created_at_ms: u64 = receipt.split(' ').nth(1).unwrap().parse().unwrap();
    assert_eq!(logged.len(), 2, "{logged:?}");
    assert!(logged.iter().all(|(_, at_us)| at_us / 1000 == created_at_ms && *at_us == logged[0].1), "{logged:?}");
    let words = |v: &Value| -> Vec<String> {
        match v {
            Value::Array(items) => items.iter().map(|i| format!("{i:?}")).collect(),
            other => vec![format!("{other:?}")],
        }
    };
    let text = |v: &Value| -> String { redis::from_redis_value_ref(v).unwrap() };
    // alice: admitted (4 of 5 left), bought.
    let Value::Array(first) = &replies[0] else { panic!("{replies:?}") };
    assert_eq!(redis::from_redis_value_ref::<Vec<i64>>(&first[0]).unwrap()[..2], [1, 4], "{replies:?}");
    assert_eq!(text(&first[2]), "ok", "alice bought: {replies:?}");
    // bob: his part failed with the limiter's error.
    let Value::Array(second) = &replies[1] else { panic!("{replies:?}") };
    assert_eq!(text(&second[0]), "failed", "{replies:?}");
    assert!(text(&second[1]).contains("WRONGTYPE"), "{:?}", words(&replies[1]));
    // alice again: admitted (3 left), refused with her first order, still queued.
    let Value::Array(third) = &replies[2] else { panic!("{replies:?}") };
    assert_eq!(redis::from_redis_value_ref::<Vec<i64>>(&third[0]).unwrap()[..2], [1, 3], "{replies:?}");
    let again: Vec<String> = redis::from_redis_value_ref(&third[2]).unwrap();
    assert_eq!(
        (again[0].as_str(), again[1].as_str(), again[3].as_str()),
        ("already_purchased", orders[0].as_str(), "queued")
    );
    // carol, without limits: buy.lua's own reply.
    assert_eq!(text(&replies[3]), "ok", "{replies:?}");

    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    let buyers: BTreeSet<String> = redis.smembers(&keys.buyers).await.unwrap();
    let entries: redis::streams::StreamRangeReply = redis.xrange_all(&keys.orders).await.unwrap();
    let queued: Vec<String> = entries.ids.iter().flat_map(seckill::redis::order_stream::users).collect();
    let bob: Option<String> = redis.hget(&keys.receipts, "bob").await.unwrap();
    assert_eq!(stock, 8, "two units sold");
    assert_eq!(buyers, BTreeSet::from(["alice".to_owned(), "carol".to_owned()]));
    assert_eq!(
        (queued, bob),
        (vec!["alice".to_owned(), "carol".to_owned()], None),
        "bob's failed part left no order and no receipt"
    );
    assert_eq!(entries.ids.len(), 1, "the call's two orders in one entry");
    let status = app.commit_by_hand(&sale).await;
    assert_eq!(status.persisted, Some(2));
}

/// Both purchase scripts, called directly on a queued sale (a place is written too): when a key a
/// purchase writes is of another type (the buyers, the orders, the receipts or the queue's buyers),
/// the purchase fails and leaves nothing written (a script is not rolled back: each undoes its
/// earlier writes itself), its buyer included; the buyer can then buy.
#[tokio::test]
async fn a_purchase_whose_write_fails_leaves_nothing_written_in_either_script() {
    let app = spawn_app_with(|_| {}, false).await; // no worker: the entries stay in the stream
    let mut redis = seckill::redis::connection::connect(&redis_url().into(), Duration::from_secs(5)).unwrap();
    let conn = redis.clone();
    // One purchase by `user` with place 7 (admitted until 2286), alone (buy.lua) or in a call of
    // one (buy_batch.lua): its reply, or the error it failed with.
    let buy = async |batch: bool, sale: &str, keys: &SaleKeys, user: &str| -> Result<String, String> {
        let mut redis = conn.clone();
        let order = Uuid::now_v7().to_string();
        let reply: Value = if batch {
            let mut call = Algorithm::SlidingLog.with_purchases().key(&keys.all()[..]);
            call.arg(sale).arg(1).arg(1).arg(user).arg(&order).arg("7.9999999999999").arg("").arg(1).arg("").arg(0);
            let mut replies: Vec<Value> = call.invoke_async(&mut redis).await.map_err(|e| e.to_string())?;
            replies.remove(0)
        } else {
            let mut call = seckill::redis::lua::BUY.key(&keys.all()[..]);
            call.arg(sale).arg(user).arg(&order).arg(1).arg("7.9999999999999").arg("");
            call.invoke_async(&mut redis).await.map_err(|e| e.to_string())?
        };
        match reply {
            failed @ Value::Array(_) => Err(redis::from_redis_value_ref::<Vec<String>>(&failed).unwrap().join(" ")),
            other => Ok(redis::from_redis_value_ref(&other).unwrap()),
        }
    };
    for batch in [false, true] {
        for damaged in ["buyers", "orders", "receipts", "queue's buyers"] {
            let what = format!("{} with the {damaged} key damaged", if batch { "buy_batch.lua" } else { "buy.lua" });
            let sale = new_sale_id();
            assert_eq!(app.seed(&sale, serde_json::json!({"stock": 5})).await.status(), 200);
            let keys = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap());
            let _: () = redis.hset(&keys.meta, "queue_rate", 100).await.unwrap(); // a place is needed, and kept
            assert_eq!(buy(batch, &sale, &keys, "before").await.as_deref(), Ok("ok"), "{what}");
            let state = async |keys: &SaleKeys| {
                let mut redis = conn.clone();
                let stock: i64 = redis.get(&keys.stock).await.unwrap();
                let buyers: BTreeSet<String> = redis.smembers(&keys.buyers).await.unwrap();
                let entries: usize = redis.xlen(&keys.orders).await.unwrap();
                let receipts: BTreeMap<String, String> = redis.hgetall(&keys.receipts).await.unwrap();
                let places: Vec<String> = redis.zrange(&keys.queue.bought, 0, -1).await.unwrap();
                (stock, buyers, entries, receipts, places)
            };
            let before = state(&keys).await;
            let key = match damaged {
                "buyers" => &keys.buyers,
                "orders" => &keys.orders,
                "receipts" => &keys.receipts,
                _ => &keys.queue.bought,
            };
            let saved = format!("{key}:saved");
            let _: () = redis.rename(key, &saved).await.unwrap();
            let _: () = redis.set(key, "not of its type").await.unwrap();
            let failed = buy(batch, &sale, &keys, "victim").await;
            assert!(failed.as_ref().is_err_and(|e| e.contains("WRONGTYPE")), "{what}: {failed:?}");
            let _: () = redis.rename(&saved, key).await.unwrap();
            assert_eq!(state(&keys).await, before, "{what}: the failed purchase left something written");
            assert_eq!(buy(batch, &sale, &keys, "victim").await.as_deref(), Ok("ok"), "{what}: then buys");
        }
    }
}

/// A call of `lua/buy_batch.lua` buying one unit for each of `users` in the unsharded `sale`,
/// with no limit checked.
fn unlimited_call(keys: &SaleKeys, sale: &str, users: &[&str]) -> redis::ScriptInvocation<'static> {
    let mut call = Algorithm::SlidingLog.with_purchases().key(&keys.all()[..]);
    call.arg(sale).arg(1).arg(users.len());
    for user in users {
        call.arg(*user).arg(Uuid::now_v7().to_string()).arg("").arg("").arg(1).arg("").arg(0);
    }
    call
}

/// A damaged count of the orders beyond one per entry (the meta's `queued_extra`, which a call of
/// several purchases raises after its other writes) fails the call's purchases with nothing of
/// them written, as a damaged key does, instead of failing the script half-way (the entry, the
/// receipts and the buyers written, the stock not taken); mended, they buy.
#[tokio::test]
async fn a_damaged_queue_count_fails_a_call_of_several_with_nothing_written() {
    let app = spawn_app_with(|_| {}, false).await;
    let mut redis = seckill::redis::connection::connect(&redis_url().into(), Duration::from_secs(5)).unwrap();
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, serde_json::json!({"stock": 5})).await.status(), 200);
    let keys = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap());
    let call = |users: [&str; 2]| unlimited_call(&keys, &sale, &users);
    let words = |reply: &Value| redis::from_redis_value_ref::<Vec<String>>(reply).unwrap_or_default();
    // Not an integer, or one HINCRBY refuses (a leading zero, "-0", 19 digits).
    for damaged in ["damaged", "007", "-0", "1234567890123456789"] {
        let _: () = redis.hset(&keys.meta, "queued_extra", damaged).await.unwrap();
        let replies: Vec<Value> = call(["ann", "bob"]).invoke_async(&mut redis).await.expect("the call answers each");
        for reply in &replies {
            let words = words(reply);
            assert!(words[0] == "failed" && words[1].contains("queued_extra"), "{damaged:?}: {replies:?}");
        }
        let stock: i64 = redis.get(&keys.stock).await.unwrap();
        let (buyers, entries, receipts): (usize, usize, usize) = (
            redis.scard(&keys.buyers).await.unwrap(),
            redis.xlen(&keys.orders).await.unwrap(),
            redis.hlen(&keys.receipts).await.unwrap(),
        );
        assert_eq!((stock, buyers, entries, receipts), (5, 0, 0, 0), "{damaged:?}: nothing of the purchases written");
    }

    let _: () = redis.hset(&keys.meta, "queued_extra", 0).await.unwrap();
    let replies: Vec<Value> = call(["ann", "bob"]).invoke_async(&mut redis).await.unwrap();
    let answers: Vec<String> = replies.iter().map(|r| redis::from_redis_value_ref(r).unwrap()).collect();
    assert_eq!(answers, ["ok", "ok"]);
    let (stock, extra): (i64, i64) =
        (redis.get(&keys.stock).await.unwrap(), redis.hget(&keys.meta, "queued_extra").await.unwrap());
    assert_eq!((stock, extra), (3, 1), "both bought, in one entry");
}

/// A call whose writes fail (a damaged receipts key) takes back the units its accepted purchases
/// had pending: a purchase refused for the stock only because of them is "failed" too, not
/// sold_out (a false sold-out set the instance's flag, and on a sharded sale sent the buyer on to
/// another shard: a second order once the first shard sold again). Mended, it buys.
#[tokio::test]
async fn a_call_whose_writes_fail_answers_no_sold_out_that_stood_on_its_units() {
    let app = spawn_app_with(|_| {}, false).await;
    let mut redis = seckill::redis::connection::connect(&redis_url().into(), Duration::from_secs(5)).unwrap();
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, serde_json::json!({"stock": 1})).await.status(), 200);
    let keys = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap());
    let call = |users: &[&str]| unlimited_call(&keys, &sale, users);
    let words = |reply: &Value| match reply {
        Value::Array(_) => redis::from_redis_value_ref::<Vec<String>>(reply).unwrap(),
        other => vec![redis::from_redis_value_ref::<String>(other).unwrap()],
    };
    let _: () = redis.set(&keys.receipts, "not a hash").await.unwrap();
    let replies: Vec<Value> = call(&["ann", "bob"]).invoke_async(&mut redis).await.expect("the call answers each");
    let answers: Vec<String> = replies.iter().map(|r| words(r)[0].clone()).collect();
    assert_eq!(answers, ["failed", "failed"], "ann's unit was never taken, so bob was not short of it: {replies:?}");
    let _: () = redis.del(&keys.receipts).await.unwrap();
    let replies: Vec<Value> = call(&["bob"]).invoke_async(&mut redis).await.unwrap();
    assert_eq!(words(&replies[0]), ["ok"], "the unit is still there");
}

/// One purchase's reply with what differs between two sales by nature (the Redis time in
/// `created_at_ms` and `pay_by_ms`) left out.
fn comparable(reply: &Value) -> Vec<String> {
    let words: Vec<String> = match reply {
        Value::Array(items) => items.iter().map(|i| redis::from_redis_value_ref(i).unwrap()).collect(),
        other => vec![redis::from_redis_value_ref(other).unwrap()],
    };
    match words.first().map(String::as_str) {
        // The time differs between the twin sales; the order, its state and its units do not.
        Some("already_purchased") if words.len() == 5 => {
            vec![words[0].clone(), words[1].clone(), words[3].clone(), words[4].clone()]
        }
        Some("reserved") => vec![words[0].clone()],
        _ => words,
    }
}

/// Differential: the same purchases, one per `lua/buy.lua` call on one sale and in calls of 1 to 6
/// of `lua/buy_batch.lua` on a twin sale, get the same replies and leave the same state, for
/// every kind of sale: in stock until sold out, with a payment window, not started, ended, never
/// seeded, asked with the wrong shard count, and with several units per buyer (random quantities). Buyers repeat, so already-purchased answers (with
/// the first order, in the same call or an earlier one) are compared too.
#[tokio::test]
async fn the_batch_script_decides_every_purchase_as_buy_lua_does() {
    let app = spawn_app_with(|_| {}, false).await; // no worker: every entry stays queued
    let mut redis = seckill::redis::connection::connect(&redis_url().into(), Duration::from_secs(5)).unwrap();
    let kinds = [
        (serde_json::json!({"stock": 5}), 1),
        (serde_json::json!({"stock": 3, "payment_window": "1m"}), 1),
        (serde_json::json!({"stock": 5, "starts_at": "2999-01-01T00:00:00Z"}), 1),
        (serde_json::json!({"stock": 5, "ends_at": "ended"}), 1), // seeded open, then ended in its meta
        (serde_json::Value::Null, 1),
        (serde_json::json!({"stock": 5}), 2),
        (serde_json::json!({"stock": 7, "per_buyer": 3}), 1), // several units: limits and short stock
    ];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    for (kind, (body, shards)) in kinds.iter().enumerate() {
        let (one, many) = (new_sale_id(), new_sale_id());
        if !body.is_null() {
            let ended = body["ends_at"] == "ended";
            for sale in [&one, &many] {
                let response = app.seed(sale, if ended { serde_json::json!({"stock": 5}) } else { body.clone() }).await;
                assert_eq!(response.status(), 200, "{body}: {}", response.text().await.unwrap());
                if ended {
                    let meta = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(sale).unwrap()).meta;
                    let _: () = redis.hset(&meta, "ends_at_ms", 1).await.unwrap();
                }
            }
        }
        // Each asks 1 to 3 units: over a sale's per_buyer of 1 that is limit_reached.
        let purchases: Vec<(String, String, u64)> =
            (0..24).map(|_| (format!("buyer-{}", next(9)), Uuid::now_v7().to_string(), 1 + next(3))).collect();
        let key_of = |sale: &str| SaleKeys::new(&app.config.key_prefix, &SaleId::parse(sale).unwrap());
        let (one_keys, many_keys) = (key_of(&one), key_of(&many));

        let mut alone = vec![];
        for (user, order, quantity) in &purchases {
            let mut call = seckill::redis::lua::BUY.key(&one_keys.all()[..]);
            call.arg(&one).arg(user).arg(order).arg(*shards).arg("").arg("").arg(*quantity);
            alone.push(comparable(&call.invoke_async::<Value>(&mut redis).await.unwrap()));
        }
        let mut together = vec![];
        let mut rest = &purchases[..];
        while !rest.is_empty() {
            let (chunk, after) = rest.split_at((1 + next(6) as usize).min(rest.len()));
            rest = after;
            let mut call = Algorithm::SlidingLog.with_purchases().key(&many_keys.all()[..]);
            call.arg(&many).arg(*shards).arg(chunk.len());
            for (user, order, quantity) in chunk {
                call.arg(user).arg(order).arg("").arg("").arg(*quantity).arg("").arg(0);
            }
            let replies: Vec<Value> = call.invoke_async(&mut redis).await.unwrap();
            together.extend(replies.iter().map(comparable));
        }
        for (i, ((user, _, _), (a, b))) in purchases.iter().zip(alone.iter().zip(&together)).enumerate() {
            assert_eq!(a, b, "sale kind {kind} ({body}), purchase {i} by {user}");
        }
        // The orders queued, as the worker reads them (a batch call's in one entry), and as the
        // sale's status counts them (the entries and the meta's queued_extra).
        let state = async |keys: &SaleKeys| -> (Option<i64>, usize, Vec<String>, i64, Option<i64>) {
            let mut redis = redis.clone();
            let stock: Option<i64> = redis.get(&keys.stock).await.unwrap();
            let buyers: usize = redis.scard(&keys.buyers).await.unwrap();
            let entries: redis::streams::StreamRangeReply = redis.xrange_all(&keys.orders).await.unwrap();
            let queued: Vec<String> = entries.ids.iter().flat_map(seckill::redis::order_stream::users).collect();
            let extra: Option<i64> = redis.hget(&keys.meta, "queued_extra").await.unwrap();
            let counted = entries.ids.len() as i64 + extra.unwrap_or(0);
            let extra_units: Option<i64> = redis.hget(&keys.meta, "extra_units").await.unwrap();
            (stock, buyers, queued, counted, extra_units)
        };
        assert_eq!(state(&one_keys).await, state(&many_keys).await, "sale kind {kind} ({body}): the state after");
    }
}

/// A purchase of `user` without limits, with a new order id.
fn plain_part(user: &str) -> seckill::purchase::batch::Part {
    seckill::purchase::batch::Part {
        user: user.into(),
        order_id: Uuid::now_v7().to_string(),
        place: String::new(),
        traceparent: String::new(),
        quantity: 1,
        proven: false,
        limits: vec![],
    }
}

/// A server that accepts connections and never answers (calls to it hang), and its URL.
fn silent_server() -> (std::net::TcpListener, String) {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    (silent, url)
}

/// A lane whose calls stop mid-way (its runtime shut down, as an HTTP worker's does at shutdown)
/// goes with them: the purchase making its own call and the one queued behind it stop there, and
/// the next purchase on that thread and shard starts a new lane and is answered, instead of
/// waiting behind a call that will never come back.
#[test]
fn a_lane_whose_calls_stopped_mid_way_does_not_hold_the_next_purchase() {
    use seckill::purchase::batch::{Batcher, Target};
    use seckill::redis::Keyspace;

    let batcher = Arc::new(Batcher::new(64, None));
    let sale = SaleId::parse(&new_sale_id()).unwrap();
    let keys = SaleKeys::new("lane", &sale);
    let part = || plain_part("u1");
    // The first call hangs on a silent server.
    let (_silent, silent_url) = silent_server();
    let first = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let queued = first.block_on(async {
        let conn = seckill::redis::connection::connect(&silent_url.into(), Duration::from_secs(60)).unwrap();
        let redis = Keyspace::new(conn, "lane");
        let mut purchases = vec![];
        for _ in 0..2 {
            let (batcher, redis, target_keys, sale, part) =
                (batcher.clone(), redis.clone(), keys.clone(), sale.clone(), part());
            purchases.push(tokio::spawn(async move {
                let mut con = redis.purchase_conn().await;
                batcher.buy(&redis, &mut con, &Target::new(sale.as_str(), &target_keys, 1), part).await
            }));
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        purchases
    });
    // Both are still waiting: the first on the silent server, the second behind it.
    assert!(queued.iter().all(|p| !p.is_finished()), "the purchases on the silent server were answered");
    drop(first); // both stop in the middle

    let second = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    second.block_on(async {
        let conn = seckill::redis::connection::connect(&redis_url().into(), Duration::from_secs(5)).unwrap();
        let redis = Keyspace::new(conn, "lane");
        let mut con = redis.purchase_conn().await;
        let bought = tokio::time::timeout(
            Duration::from_secs(10),
            batcher.buy(&redis, &mut con, &Target::new(sale.as_str(), &keys, 1), part()),
        )
        .await
        .expect("the purchase waited on a lane nobody drives");
        assert_eq!(bought.unwrap(), Value::BulkString(b"unknown_sale".to_vec()), "a new lane made the call");
    });
}

/// With more threads than lane groups (HTTP workers outnumbering the CPUs), threads share lanes:
/// 8 threads, each buying one purchase at a time, still share calls (with a lane per thread no
/// call could carry two), and every purchase gets its own verdict: exactly the stock sold, each
/// order once in Postgres.
#[test]
fn threads_beyond_the_cpus_share_lanes_and_each_purchase_keeps_its_verdict() {
    use seckill::purchase::batch::{Batcher, Target};
    use seckill::redis::Keyspace;

    const THREADS: usize = 8;
    const EACH: usize = 40;
    let stock = 150;
    let home = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (app, redis) = home.block_on(async {
        let app = spawn_app().await;
        let conn = seckill::redis::connection::connect(&redis_url().into(), Duration::from_secs(5)).unwrap();
        let redis = Keyspace::new(conn, app.config.key_prefix.clone());
        (app, redis)
    });
    let sale = new_sale_id();
    home.block_on(app.seed_stock(&sale, stock));
    let sizes =
        prometheus::Histogram::with_opts(prometheus::HistogramOpts::new("sizes", "purchases per call")).unwrap();
    let batcher = Arc::new(Batcher::new(64, Some(sizes.clone())).shared_by(THREADS, 2));
    let keys = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap());

    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (batcher, redis, keys, sale) = (batcher.clone(), redis.clone(), keys.clone(), sale.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async {
                    let mut con = redis.purchase_conn().await;
                    let mut replies = vec![];
                    for i in 0..EACH {
                        let part = plain_part(&format!("t{t}-u{i}"));
                        let order = part.order_id.clone();
                        let target = Target::new(sale.as_str(), &keys, 1);
                        let reply = batcher.buy(&redis, &mut con, &target, part).await.unwrap();
                        replies.push((order, redis::from_redis_value::<String>(reply).unwrap()));
                    }
                    replies
                })
            })
        })
        .collect();
    let replies: Vec<(String, String)> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();

    let bought: BTreeSet<Uuid> =
        replies.iter().filter(|(_, reply)| reply == "ok").map(|(order, _)| order.parse().unwrap()).collect();
    let sold_out = replies.iter().filter(|(_, reply)| reply == "sold_out").count();
    assert_eq!((bought.len(), sold_out), (stock as usize, THREADS * EACH - stock as usize), "{replies:?}");
    let (calls, purchases) = (sizes.get_sample_count() as f64, sizes.get_sample_sum());
    assert_eq!(purchases as usize, THREADS * EACH, "every purchase went through the batcher");
    assert!(calls < purchases, "{calls} calls for {purchases} purchases: no thread's purchase joined another's call");
    let status = home.block_on(app.assert_invariants(&sale, &bought));
    assert_eq!((status.stock_left, status.sold, status.persisted), (0, stock, Some(stock)));
}

/// When threads share a lane, its queued purchases are sent from the runtime of the shared
/// connection: the thread whose own call started the lane may stop (an HTTP worker at shutdown)
/// and the purchase another thread queued behind it is still sent and answered.
#[test]
fn a_thread_stopping_takes_no_other_threads_purchase_from_a_shared_lane() {
    use futures::FutureExt;
    use seckill::purchase::batch::{Batcher, Target};
    use seckill::redis::Keyspace;

    let home = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let redis = home.block_on(async {
        let conn = seckill::redis::connection::connect(&redis_url().into(), Duration::from_secs(5)).unwrap();
        Keyspace::new(conn, "lane")
    });
    let batcher = Arc::new(Batcher::new(64, None).shared_by(2, 1));
    let sale = SaleId::parse(&new_sale_id()).unwrap();
    let keys = SaleKeys::new("lane", &sale);
    let part = plain_part;
    // Thread X's purchase makes its own call, on a server that never answers.
    let (_silent, silent_url) = silent_server();
    let x = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut first = {
        let (batcher, redis, keys, sale, part) =
            (batcher.clone(), redis.clone(), keys.clone(), sale.clone(), part("x"));
        async move {
            let mut con = seckill::redis::connection::connect(&silent_url.into(), Duration::from_secs(60)).unwrap();
            batcher.buy(&redis, &mut con, &Target::new(sale.as_str(), &keys, 1), part).await
        }
        .boxed()
    };
    x.block_on(async { assert!(futures::poll!(&mut first).is_pending(), "the silent server answered") });
    // Thread Y's purchase queues behind it (another runtime, as another HTTP worker).
    let y = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut queued = {
        let (batcher, redis, keys, sale, part) =
            (batcher.clone(), redis.clone(), keys.clone(), sale.clone(), part("y"));
        async move {
            let mut con = redis.purchase_conn().await;
            batcher.buy(&redis, &mut con, &Target::new(sale.as_str(), &keys, 1), part).await
        }
        .boxed()
    };
    y.block_on(async { assert!(futures::poll!(&mut queued).is_pending(), "the second purchase did not queue") });
    // X stops with its call in flight, as a worker's runtime at shutdown.
    x.block_on(async move { drop(first) });
    drop(x);
    let answered = y
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), queued).await })
        .expect("the queued purchase was never sent");
    assert_eq!(answered.unwrap(), Value::BulkString(b"unknown_sale".to_vec()), "sent, and Redis answered");
}

/// A call sent again after its first run bought (a Redis Cluster client re-sends a call that timed
/// out) answers each purchase with its own order, not the refusal its limits give the second
/// time: the app answers 201 for it, where it answered 429 though the order was made. Both the
/// batch and the one-purchase script, with a limit of one request a minute.
#[tokio::test]
async fn a_call_sent_again_after_it_bought_answers_its_own_order_not_a_refusal() {
    let app = spawn_app().await;
    let (sale, keys, tag, mut redis) = for_direct_calls(&app).await;
    let policy =
        Policy::new(Algorithm::SlidingLog, RateLimit { limit: 1, window: Duration::from_secs(60) }, None).unwrap();
    let (batched, single) = (Uuid::now_v7().to_string(), Uuid::now_v7().to_string());
    let batch = || {
        let mut call = Algorithm::SlidingLog.with_purchases().key(&keys.all()[..]);
        call.arg(&sale).arg(1).arg(1);
        call.arg("ann").arg(batched.as_str()).arg("").arg("").arg(1).arg("").arg(1);
        call.key(format!("t:{{{tag}}}:limit:ann"));
        policy.push_args(&mut call, &batched, None);
        call
    };
    let one = || {
        let mut call = Algorithm::SlidingLog.with_purchase().key(&keys.all()[..]);
        call.key(format!("t:{{{tag}}}:limit:bob"));
        call.arg(&sale).arg("bob").arg(single.as_str()).arg(1).arg("").arg("").arg(1).arg("").arg(1);
        policy.push_args(&mut call, &single, None);
        call
    };
    // Every word of a reply, nested arrays flattened.
    fn words(reply: &Value) -> Vec<String> {
        match reply {
            Value::Array(items) => items.iter().flat_map(words).collect(),
            other => vec![redis::from_redis_value_ref::<String>(other).unwrap_or_else(|_| format!("{other:?}"))],
        }
    }
    for (user, order) in [("ann", &batched), ("bob", &single)] {
        let call = if user == "ann" { batch() } else { one() };
        let first: Value = call.invoke_async(&mut redis).await.unwrap();
        assert_eq!(words(&first)[0], "1", "{user}'s first run: admitted and bought: {first:?}");
        let call = if user == "ann" { batch() } else { one() };
        let again = words(&call.invoke_async(&mut redis).await.unwrap());
        assert_eq!(again[..3], ["0", "0", "already_purchased"], "{user} sent again: {again:?}");
        assert_eq!(&again[3], order, "{user}'s own order");
    }
    let log: i64 = redis.zcard(format!("t:{{{tag}}}:limit:bob")).await.unwrap();
    assert_eq!(log, 1, "a refusal still writes nothing");
}
