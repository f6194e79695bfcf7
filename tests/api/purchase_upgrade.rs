//! Issue 54 changed how a call of purchases writes (one stream entry for the call's orders, one
//! HSET of receipts, one SADD of buyers; the sliding log's checks of one key counted once a call)
//! and promised that nothing else changed. Held here against the batch script as it was before
//! (`fixtures/buy_batch_before_issue_54.lua`, assembled with the sliding log, from `323336a`):
//! - the same random purchase sequences on twin sales get the same answers and leave the same
//!   buyers, receipts, orders, units, places and limiter logs, over every kind of sale; but for
//!   one change made since: a buyer asking again hears of their order before the gates, where
//!   the old script answered `not_admitted`, `ended` and the like;
//! - a sale sold by the old script keeps selling after the upgrade, and the worker stores every
//!   order of both formats once, an entry of more orders than its batch in several statements.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::streams::StreamRangeReply;
use redis::{AsyncCommands, Value};
use seckill::domain::SaleId;
use seckill::limiter::Algorithm;
use seckill::orders::worker::StepOutcome;
use seckill::redis::keys::SaleKeys;
use seckill::redis::order_stream;
use uuid::Uuid;

use crate::helpers::{new_sale_id, spawn_app_with};

/// An admission's end in Unix ms that no run reaches (the year 2286).
const FAR: u64 = 9_999_999_999_999;

/// The batch script before issue 54, as the app assembled it with the sliding log.
fn old_batch() -> redis::Script {
    redis::Script::new(include_str!("fixtures/buy_batch_before_issue_54.lua"))
}

/// A reply as a list of words, with the times Redis chose (an order's time, a payment deadline)
/// left out: the twins' calls read Redis TIME apart.
fn words(reply: &Value) -> Vec<String> {
    match reply {
        Value::Array(items) => {
            let mut words: Vec<String> = items.iter().flat_map(words).collect();
            match words.first().map(String::as_str) {
                Some("already_purchased") if words.len() == 5 => words[2] = "T".into(),
                Some("reserved") => words.truncate(1),
                _ => {}
            }
            words
        }
        other => vec![redis::from_redis_value_ref::<String>(other).unwrap_or_else(|_| format!("{other:?}"))],
    }
}

/// The refusals the old script gave before it looked at the buyer.
const GATES: [&str; 5] = ["draw_only", "not_admitted", "challenge_required", "not_started", "ended"];

/// Deterministic draws (xorshift) from a seed.
struct Draws(u64);

impl Draws {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// A kind of sale: its meta's fields besides the stock's, the stock, whether it pauses midway.
type Kind = (&'static [(&'static str, &'static str)], i64, bool);

/// One purchase of a call: buyer, quantity, place, proven, client key number, checks.
type Purchase = (String, u64, &'static str, &'static str, u64, u64);

/// Everything a purchase leaves in the twin's keys, times left out: stock, buyers, receipts (order
/// id and units), the queued orders in order (id, buyer, units), the units over one, the group's
/// holdings, the places taken and every limiter log (scores and members: the clock is the test's).
async fn state(redis: &mut seckill::redis::connection::RedisConnection, keys: &SaleKeys, limits: &[String]) -> String {
    let stock: Option<i64> = redis.get(&keys.stock).await.unwrap();
    let buyers: BTreeSet<String> = redis.smembers(&keys.buyers).await.unwrap();
    let receipts: std::collections::BTreeMap<String, String> = redis.hgetall(&keys.receipts).await.unwrap();
    let receipts: Vec<(String, String, String)> = receipts
        .into_iter()
        .map(|(user, kept)| {
            let words: Vec<&str> = kept.split(' ').collect();
            (user, words[0].to_owned(), words.get(3).copied().unwrap_or("1").to_owned())
        })
        .collect();
    let entries: StreamRangeReply = redis.xrange_all(&keys.orders).await.unwrap();
    let sale = SaleId::parse("s").unwrap();
    let orders: Vec<(Uuid, String, u32)> = entries
        .ids
        .iter()
        .flat_map(|entry| order_stream::decode(entry, &sale).unwrap())
        .map(|order| (order.order_id, order.user_id.to_string(), order.quantity))
        .collect();
    let extra: Option<i64> = redis.hget(&keys.meta, "extra_units").await.unwrap();
    let held: std::collections::BTreeMap<String, String> = redis.hgetall(&keys.held).await.unwrap();
    let places: Vec<(String, f64)> = redis.zrange_withscores(&keys.queue.bought, 0, -1).await.unwrap();
    let mut logs = vec![];
    for key in limits {
        let log: Vec<(String, f64)> = redis.zrange_withscores(key, 0, -1).await.unwrap();
        logs.push(log);
    }
    format!("{stock:?}\n{buyers:?}\n{receipts:?}\n{orders:?}\n{extra:?}\n{held:?}\n{places:?}\n{logs:?}")
}

#[tokio::test]
async fn the_new_batch_script_answers_and_writes_as_the_old_one_over_random_purchases() {
    let app = spawn_app_with(|_| {}, false).await;
    let mut redis = app.redis.clone();
    let kinds: [Kind; 7] = [
        (&[], 12, false),
        (&[("payment_window_ms", "60000")], 9, false),
        (&[("per_buyer", "3"), ("group", "g")], 14, false),
        (&[("queue_rate", "10")], 10, false),
        (&[("challenge_cost", "5")], 10, false),
        (&[], 20, true),
        (&[("line", "draw")], 5, false),
    ];
    let mut draws = Draws(0x9e37_79b9_7f4a_7c15);
    let (old, new) = (old_batch(), Algorithm::SlidingLog.with_purchases());
    let scripts = [&old, new];
    for (kind, (fields, stock, pauses)) in kinds.iter().enumerate() {
        for round in 0..4 {
            let twins = [new_sale_id(), new_sale_id()].map(|id| SaleKeys::new("diff", &SaleId::parse(&id).unwrap()));
            for keys in &twins {
                let mut meta = vec![("stock_initial", stock.to_string()), ("shards", "1".to_owned())];
                meta.extend(fields.iter().map(|(f, v)| (*f, (*v).to_owned())));
                let _: () = redis.hset_multiple(&keys.meta, &meta).await.unwrap();
                let _: () = redis.set(&keys.stock, stock).await.unwrap();
            }
            let limit_key = |keys: &SaleKeys, name: String| format!("{}:limit:{name}", keys.meta);
            let mut limits: [BTreeSet<String>; 2] = Default::default();
            let now_us = 1_700_000_000_000_000u64;
            let mut step = 0;
            while step < 40 {
                let n = (1 + draws.below(8)).min(40 - step);
                let calls: Vec<Purchase> = (0..n)
                    .map(|_| {
                        let user = format!("buyer-{}", draws.below(12));
                        let place = ["", "7", "d7"][draws.below(3) as usize];
                        let proven = ["", "1"][draws.below(2) as usize];
                        (user, 1 + draws.below(3), place, proven, draws.below(3), draws.below(3))
                    })
                    .collect();
                if *pauses && (16..28).contains(&step) {
                    for keys in &twins {
                        let _: () = redis.hset(&keys.meta, "paused", "").await.unwrap();
                    }
                } else if *pauses {
                    for keys in &twins {
                        let _: () = redis.hdel(&keys.meta, "paused").await.unwrap();
                    }
                }
                // The buyers before the call, in the old script's twin (both twins hold the same).
                let bought_before: BTreeSet<String> = redis.smembers(&twins[0].buyers).await.unwrap();
                let mut answers = vec![];
                for (which, (twin, script)) in twins.iter().zip(scripts).enumerate() {
                    let mut call = script.key(&twin.all()[..]);
                    call.arg("s").arg(1).arg(n);
                    let mut keys = vec![];
                    for (i, (user, quantity, place, proven, client, checks)) in calls.iter().enumerate() {
                        let order = Uuid::from_u128(u128::from(step) << 32 | i as u128).to_string();
                        // The new script's place carries its admission's end (far off here): the old one's did not.
                        let place =
                            if which == 1 && !place.is_empty() { format!("{place}.{FAR}") } else { place.to_string() };
                        call.arg(user).arg(order).arg(place).arg("").arg(*quantity).arg(*proven).arg(*checks);
                        // The client's limit (3 clients: one address's purchases meet in a call), then
                        // the buyer's: 4 a second, on the test's clock (10 ms a call).
                        let names = [format!("client-{client}"), format!("buyer-{user}")];
                        for name in names.into_iter().take(*checks as usize) {
                            keys.push(limit_key(twin, name));
                            call.arg(4).arg(1000).arg(4).arg(format!("{step}-{i}")).arg(now_us + step * 10_000);
                        }
                    }
                    for key in &keys {
                        call.key(key.as_str());
                    }
                    limits[which].extend(keys);
                    let replies: Vec<Value> = call.invoke_async(&mut redis).await.unwrap();
                    answers.push(replies.iter().map(words).collect::<Vec<_>>());
                }
                // One change since: a buyer asking again hears of their order before the gates (the
                // draw, the line, the proof, the hours), where the old script refused them there.
                let mut buyers = bought_before;
                for (i, (user, ..)) in calls.iter().enumerate() {
                    let (old, new) = (answers[0][i].clone(), &answers[1][i]);
                    if old.last().is_some_and(|w| w == "ok" || w == "reserved") {
                        buyers.insert(user.clone());
                    }
                    let gate = old.last().is_some_and(|w| GATES.contains(&w.as_str()));
                    if buyers.contains(user) && gate && new.get(old.len() - 1).is_some_and(|w| w == "already_purchased")
                    {
                        answers[0][i] = new.clone();
                    }
                }
                assert_eq!(answers[0], answers[1], "kind {kind} round {round}, call at step {step}: {calls:?}");
                step += n;
            }
            let [old_limits, new_limits] = limits.map(|keys| keys.into_iter().collect::<Vec<_>>());
            let old_state = state(&mut redis, &twins[0], &old_limits).await;
            let new_state = state(&mut redis, &twins[1], &new_limits).await;
            assert_eq!(old_state, new_state, "kind {kind} round {round}: the state after");
            // The queue's length as the sale's status counts it: the entries and queued_extra.
            let entries: usize = redis.xlen(&twins[1].orders).await.unwrap();
            let extra: Option<i64> = redis.hget(&twins[1].meta, "queued_extra").await.unwrap();
            let old_entries: usize = redis.xlen(&twins[0].orders).await.unwrap();
            assert_eq!(entries as i64 + extra.unwrap_or(0), old_entries as i64, "kind {kind}: every order counted");
        }
    }
}

/// A sale sold by the old script before the upgrade: its buyers stay buyers, new buyers buy, and
/// once the worker has run every order of either format is in Postgres once.
#[tokio::test]
async fn a_sale_sold_before_the_upgrade_keeps_selling_and_every_order_is_stored_once() {
    let app = spawn_app_with(|_| {}, false).await; // the worker runs by hand, below
    let sale = new_sale_id();
    app.seed_stock(&sale, 30).await;
    let keys = app.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap());
    let mut redis = app.redis.clone();
    let mut confirmed = BTreeSet::new();
    let old = old_batch();
    // Before: the old script sells to six buyers in two calls (an entry each).
    for users in [["old-0", "old-1", "old-2"], ["old-3", "old-4", "old-5"]] {
        let mut call = old.key(&keys.all()[..]);
        call.arg(&sale).arg(1).arg(users.len());
        for user in users {
            let order = Uuid::now_v7();
            confirmed.insert(order);
            call.arg(user).arg(order.to_string()).arg("").arg("").arg(1).arg("").arg(0);
        }
        let replies: Vec<Value> = call.invoke_async(&mut redis).await.unwrap();
        assert!(replies.iter().all(|reply| words(reply) == ["ok"]), "{replies:?}");
    }
    assert_eq!(redis.xlen::<_, usize>(&keys.orders).await.unwrap(), 6, "the old format: an entry per order");

    // After: an old buyer again is refused with their order, still queued; new buyers buy, some
    // in one call of the new script (one entry), some through the service.
    let again = app.buy(&sale, "old-4").await;
    assert_eq!(again.status(), 409);
    let body: serde_json::Value = again.json().await.unwrap();
    assert_eq!(body["error"], "already_purchased", "{body}");
    let mut call = Algorithm::SlidingLog.with_purchases().key(&keys.all()[..]);
    call.arg(&sale).arg(1).arg(4);
    for user in ["new-0", "new-1", "old-1", "new-2"] {
        let order = Uuid::now_v7();
        call.arg(user).arg(order.to_string()).arg("").arg("").arg(1).arg("").arg(0);
        if user.starts_with("new") {
            confirmed.insert(order);
        }
    }
    let replies: Vec<Value> = call.invoke_async(&mut redis).await.unwrap();
    let answers: Vec<String> = replies.iter().map(|reply| words(reply)[0].clone()).collect();
    assert_eq!(answers, ["ok", "ok", "already_purchased", "ok"]);
    for user in ["new-3", "new-4"] {
        let bought = app.buy(&sale, user).await;
        assert_eq!(bought.status(), 201);
        let body: serde_json::Value = bought.json().await.unwrap();
        confirmed.insert(body["order_id"].as_str().unwrap().parse().unwrap());
    }
    let status = app.status(&sale).await;
    assert_eq!((status.sold, status.queued), (11, 11), "every order counted as queued, of either format");

    // Two entries a step, two orders a statement: the entry of three orders takes two.
    let mut worker = app.manual_worker_batched("upgraded", Duration::from_secs(60), 2);
    assert_ne!(worker.step().await.unwrap(), StepOutcome::Idle);
    let status = app.status(&sale).await;
    let committed = status.persisted.unwrap();
    assert!(committed > 0 && committed < 11, "one step commits some: {committed}");
    assert_eq!(status.queued, 11 - committed, "the trimmed entries took their orders out of the count");
    while worker.step().await.unwrap() != StepOutcome::Idle {}
    let status = app.assert_invariants(&sale, &confirmed).await;
    assert_eq!((status.sold, status.persisted, status.queued), (11, Some(11), 0));
    let extra: Option<i64> = redis.hget(&keys.meta, "queued_extra").await.unwrap();
    assert_eq!(extra, None, "the count ends with the stream's last entry");
}
