//! The buyer's side of a sale: the public status (`GET /sales/{id}`: countdown on the Redis
//! clock, ETag, bounded Redis reads under a polling crowd), the buyer's own order
//! (`GET /sales/{id}/order`), and a 409 that carries the order a retry was given.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use redis::AsyncCommands;
use reqwest::header::{CACHE_CONTROL, ETAG, IF_NONE_MATCH};
use seckill::domain::SaleId;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::time::Instant;
use uuid::Uuid;

use crate::common::redis_masters;
use crate::helpers::{TestApp, assert_error, new_sale_id, spawn_app_with};

async fn public_status(app: &TestApp, sale: &str) -> reqwest::Response {
    app.client.get(app.url(&format!("/sales/{sale}"))).send().await.unwrap()
}

async fn order_of(app: &TestApp, sale: &str, user: &str) -> Value {
    let response = app.client.get(app.url(&format!("/sales/{sale}/order?user_id={user}"))).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()[CACHE_CONTROL], "no-store");
    assert!(response.headers().contains_key("ratelimit-policy"), "the order route is rate-limited like /buy");
    response.json().await.unwrap()
}

fn rfc3339(value: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(value.as_str().unwrap_or_else(|| panic!("not a time: {value}")), &Rfc3339).unwrap()
}

/// The Redis server's clock, read directly.
async fn redis_time(app: &TestApp) -> OffsetDateTime {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut app.redis.clone()).await.unwrap();
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(secs) * 1_000_000_000 + i128::from(micros) * 1000).unwrap()
}

/// Polls the public status until its `state` is `want` (within 10 s); returns the body.
async fn wait_for_state(app: &TestApp, sale: &str, want: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let body: Value = public_status(app, sale).await.json().await.unwrap();
        if body["state"] == want {
            return body;
        }
        assert!(Instant::now() < until, "state never became {want}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn order_id_of(response: reqwest::Response) -> Uuid {
    let body: Value = response.json().await.unwrap();
    body["order_id"].as_str().and_then(|id| id.parse().ok()).unwrap_or_else(|| panic!("no order id: {body}"))
}

#[tokio::test]
async fn the_public_status_counts_down_on_the_redis_clock_then_opens_then_sells_out() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    // Far enough ahead that a loaded host checks the countdown before the start.
    let starts_at = OffsetDateTime::now_utc() + Duration::from_secs(5);
    let seeded = app.seed(&sale, json!({"stock": 2, "starts_at": starts_at.format(&Rfc3339).unwrap()})).await;
    assert_eq!(seeded.status(), 200);

    // The Redis clock read before the request and after the answer brackets its server_time.
    let before = redis_time(&app).await;
    let response = public_status(&app, &sale).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()[CACHE_CONTROL], "public, max-age=1");
    assert!(response.headers()[ETAG].to_str().unwrap().starts_with("W/\""));
    let body: Value = response.json().await.unwrap();
    let after = redis_time(&app).await;
    assert_eq!(body["sale_id"], sale.as_str());
    assert_eq!(body["state"], "upcoming", "{body}");
    assert_eq!((body["stock_initial"].as_i64(), body["stock_left"].as_i64()), (Some(2), Some(2)));
    assert!(body["ends_at"].is_null());
    let server_time = rfc3339(&body["server_time"]);
    let slack = Duration::from_millis(50);
    assert!(
        before - slack <= server_time && server_time <= after + slack,
        "server_time {server_time} is not the Redis clock ({before} .. {after})"
    );
    assert!(rfc3339(&body["starts_at"]) > server_time, "the countdown has time left: {body}");

    assert_error(app.buy(&sale, "early").await, 403, "sale_not_started").await;
    let open = wait_for_state(&app, &sale, "open").await;
    assert!(rfc3339(&open["server_time"]) >= rfc3339(&open["starts_at"]), "{open}");
    assert_eq!(app.buy(&sale, "a").await.status(), 201);
    assert_eq!(app.buy(&sale, "b").await.status(), 201);
    let sold_out = wait_for_state(&app, &sale, "sold_out").await;
    assert_eq!(sold_out["stock_left"], 0);
}

#[tokio::test]
async fn an_ended_sale_says_so() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    let now = OffsetDateTime::now_utc();
    let window = json!({"stock": 5, "starts_at": (now - Duration::from_secs(60)).format(&Rfc3339).unwrap(),
                        "ends_at": (now + Duration::from_secs(4)).format(&Rfc3339).unwrap()});
    assert_eq!(app.seed(&sale, window).await.status(), 200);
    assert_eq!(wait_for_state(&app, &sale, "open").await["stock_left"], 5);
    wait_for_state(&app, &sale, "ended").await;
}

#[tokio::test]
async fn an_unchanged_status_answers_304_to_its_etag_and_a_change_gives_a_new_one() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 5).await;
    let etag = public_status(&app, &sale).await.headers()[ETAG].clone();

    let again = app.client.get(app.url(&format!("/sales/{sale}"))).header(IF_NONE_MATCH, &etag).send().await.unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()[ETAG], etag);
    assert!(again.bytes().await.unwrap().is_empty());

    assert_eq!(app.buy(&sale, "u").await.status(), 201);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let response =
            app.client.get(app.url(&format!("/sales/{sale}"))).header(IF_NONE_MATCH, &etag).send().await.unwrap();
        if response.status() == 200 {
            assert_ne!(response.headers()[ETAG], etag);
            assert_eq!(response.json::<Value>().await.unwrap()["stock_left"], 4);
            break;
        }
        assert_eq!(response.status(), 304);
        assert!(Instant::now() < until, "the purchase never showed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn unknown_and_malformed_sales_are_refused_with_json() {
    let app = spawn_app_with(|_| {}, false).await;
    assert_error(public_status(&app, &new_sale_id()).await, 404, "unknown_sale").await;
    assert_error(public_status(&app, "not%20a%20sale").await, 400, "invalid_request").await;
    let order = |path: String| app.client.get(app.url(&path)).send();
    assert_error(order(format!("/sales/{}/order?user_id=u", new_sale_id())).await.unwrap(), 404, "unknown_sale").await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 1).await;
    assert_error(order(format!("/sales/{sale}/order")).await.unwrap(), 400, "invalid_request").await;
    assert_error(order(format!("/sales/{sale}/order?user_id=%07")).await.unwrap(), 400, "invalid_request").await;
    assert_error(order(format!("/sales/{sale}/order?user_id=u&x=1")).await.unwrap(), 400, "invalid_request").await;
    let post = app.client.post(app.url(&format!("/sales/{sale}"))).send().await.unwrap();
    assert_error(post, 405, "method_not_allowed").await;
}

/// Counts the commands Redis (every master) runs that name a key under `prefix`, until dropped.
struct RedisCommandCounter {
    count: Arc<AtomicU64>,
    /// The counter's own markers seen ([`RedisCommandCounter::settle`]), not counted above.
    markers: Arc<AtomicU64>,
    prefix: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RedisCommandCounter {
    async fn start(prefix: &str) -> Self {
        let (count, markers) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut tasks = vec![];
        for url in redis_masters() {
            let monitor = redis::Client::open(url).unwrap().get_async_monitor().await.unwrap();
            let (count, markers) = (count.clone(), markers.clone());
            let (needle, marker) = (format!("\"{prefix}:"), format!("\"{prefix}:counter-marker\""));
            tasks.push(tokio::spawn(async move {
                let mut lines = monitor.into_on_message::<String>();
                while let Some(line) = lines.next().await {
                    if line.contains(&marker) {
                        markers.fetch_add(1, Ordering::Relaxed);
                    } else if line.contains(&needle) {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        Self { count, markers, prefix: prefix.to_owned(), tasks }
    }

    /// Waits until every command run so far has reached the count: each master echoes a marker
    /// (`ECHO` names no key, so it runs on any node), and MONITOR reports a server's commands
    /// in the order it ran them.
    async fn settle(&self) {
        let masters = redis_masters();
        let wanted = self.markers.load(Ordering::Relaxed) + masters.len() as u64;
        for url in masters {
            let mut con = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
            let _: String =
                redis::cmd("ECHO").arg(format!("{}:counter-marker", self.prefix)).query_async(&mut con).await.unwrap();
        }
        let until = Instant::now() + Duration::from_secs(20);
        while self.markers.load(Ordering::Relaxed) < wanted {
            assert!(Instant::now() < until, "MONITOR never reported the markers");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for RedisCommandCounter {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|task| task.abort());
    }
}

#[tokio::test]
async fn a_polling_storm_costs_redis_a_bounded_number_of_reads_whatever_the_request_rate() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;
    let counter = RedisCommandCounter::start(&app.config.key_prefix).await;
    let counting = Instant::now();
    tokio::time::sleep(Duration::from_millis(100)).await;

    // 4,000 polls of the sale and 1,000 of made-up sales, 64 at a time.
    let started = Instant::now();
    let (app_ref, sale_ref) = (&app, sale.as_str());
    let statuses: Vec<u16> = futures::stream::iter(0..5000)
        .map(|i| {
            let target = if i % 5 == 4 { new_sale_id() } else { sale_ref.to_owned() };
            async move { public_status(app_ref, &target).await.status().as_u16() }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let elapsed = started.elapsed();
    counter.settle().await;
    let commands = counter.count();
    let counted_for = counting.elapsed(); // the storm, the quiet 100 ms before it and the settling

    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 4000);
    assert_eq!(statuses.iter().filter(|s| **s == 404).count(), 1000);
    // Per 200 ms at most: the registry (SMEMBERS) and the sale (HMGET, GET, SCARD, XLEN); the
    // TIME beside them names no key. Over the whole time the counter counted, with two
    // refreshes of slack for the windows at both ends.
    let refreshes = (counted_for.as_secs_f64() / 0.2).ceil() as u64 + 2;
    let bound = refreshes * 5;
    println!(
        "polling storm: 5000 requests in {:.2} s ({:.0}/s); Redis ran {commands} commands on the deployment's keys \
         ({:.1}/s, bound {bound})",
        elapsed.as_secs_f64(),
        5000.0 / elapsed.as_secs_f64(),
        commands as f64 / (elapsed.as_secs_f64() + 0.2),
    );
    assert!(commands > 0, "the counter saw the snapshot reads");
    assert!(commands <= bound, "{commands} Redis commands for 5000 polls over {elapsed:?}: over the bound {bound}");
}

#[tokio::test]
async fn the_order_route_says_none_then_queued_then_confirmed_with_the_201s_order() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    assert_eq!(order_of(&app, &sale, "u").await, json!({"status": "none"}));

    let bought = app.buy(&sale, "u").await;
    assert_eq!(bought.status(), 201);
    let order_id = order_id_of(bought).await;
    let queued = order_of(&app, &sale, "u").await;
    assert_eq!(queued["status"], "queued", "{queued}");
    assert_eq!(queued["order_id"], order_id.to_string());
    let created_at = rfc3339(&queued["created_at"]);

    app.commit_by_hand(&sale).await;
    let confirmed = order_of(&app, &sale, "u").await;
    assert_eq!(confirmed["status"], "confirmed", "{confirmed}");
    assert_eq!(confirmed["order_id"], order_id.to_string());
    assert_eq!(rfc3339(&confirmed["created_at"]), created_at, "Postgres keeps the Redis time");
    assert_eq!(order_of(&app, &sale, "v").await, json!({"status": "none"}));
}

#[tokio::test]
async fn a_repeat_purchase_gets_409_with_the_order_it_was_given_queued_then_confirmed() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    let order_id = order_id_of(app.buy(&sale, "u").await).await;

    let again = app.buy(&sale, "u").await;
    assert_eq!(again.status(), 409);
    let body: Value = again.json().await.unwrap();
    assert_eq!(body["error"], "already_purchased");
    assert_eq!((body["order_id"].as_str(), body["status"].as_str()), (Some(&*order_id.to_string()), Some("queued")));
    assert!(body["created_at"].is_string(), "{body}");

    app.commit_by_hand(&sale).await;
    let body: Value = app.buy(&sale, "u").await.json().await.unwrap();
    assert_eq!((body["order_id"].as_str(), body["status"].as_str()), (Some(&*order_id.to_string()), Some("confirmed")));
}

#[tokio::test]
async fn a_sold_out_instance_answers_a_repeat_from_memory_with_its_order() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 1).await;
    let order_id = order_id_of(app.buy(&sale, "first").await).await;
    assert_error(app.buy(&sale, "second").await, 410, "sold_out").await;
    app.wait_for_sold_out_held(2.0).await; // the instance copies the buyers and receipts

    // Gone from Redis: only the instance's copy can still name the order.
    let keys = app.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap());
    let _: i64 = app.redis.clone().del(&keys.all()[..]).await.unwrap();
    let again = app.buy(&sale, "first").await;
    assert_eq!(again.status(), 409);
    let body: Value = again.json().await.unwrap();
    assert_eq!((body["order_id"].as_str(), body["status"].as_str()), (Some(&*order_id.to_string()), Some("queued")));
}

#[tokio::test]
async fn a_storm_of_repeats_gets_one_order_id_per_buyer_the_same_every_time() {
    const BUYERS: usize = 500;
    const TRIES: usize = 20;
    let app = spawn_app_with(|_| {}, true).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, BUYERS as i64).await;

    let started = Instant::now();
    let sale_ref = sale.as_str();
    let app_ref = &app;
    let answers: Vec<(usize, u16, Option<Uuid>)> = futures::stream::iter((0..TRIES).flat_map(|_| 0..BUYERS))
        .map(|buyer| async move {
            let response = app_ref.buy(sale_ref, &format!("buyer-{buyer}")).await;
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            (buyer, status, body["order_id"].as_str().and_then(|id| id.parse().ok()))
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let elapsed = started.elapsed();
    println!(
        "repeat storm: {} requests in {:.2} s ({:.0}/s, debug build)",
        answers.len(),
        elapsed.as_secs_f64(),
        answers.len() as f64 / elapsed.as_secs_f64()
    );

    let mut ids: HashMap<usize, BTreeSet<Uuid>> = HashMap::new();
    let (mut created, mut unavailable) = (0, 0);
    for (buyer, status, order_id) in answers {
        // A 503 (an overloaded host: Redis or the pool timed out) carries no order id; the
        // buyer's other tries say what it holds.
        if status == 503 {
            unavailable += 1;
            continue;
        }
        assert!(status == 201 || status == 409, "buyer-{buyer}: {status}");
        created += usize::from(status == 201);
        ids.entry(buyer).or_default().insert(order_id.unwrap_or_else(|| panic!("buyer-{buyer}: {status} without id")));
    }
    assert!(unavailable * 20 < BUYERS * TRIES, "{unavailable} answers of 503: more than 1 in 20");
    assert_eq!(ids.len(), BUYERS, "every buyer was told an order id");
    // At most one 201 each; fewer only where a 503 left the outcome to the buyer's next try.
    assert!(created <= BUYERS && created + unavailable >= BUYERS, "{created} × 201, {unavailable} × 503");
    assert!(ids.values().all(|set| set.len() == 1), "a buyer was told two order ids");
    let told: BTreeSet<Uuid> = ids.values().flatten().copied().collect();
    app.assert_invariants(&sale, &told).await;
    assert_eq!(app.order_ids(&sale).await, told, "Postgres holds exactly the ids the buyers were told");
    for buyer in [0, BUYERS / 2, BUYERS - 1] {
        let order = order_of(&app, &sale, &format!("buyer-{buyer}")).await;
        assert_eq!(order["status"], "confirmed");
        assert_eq!(order["order_id"], ids[&buyer].first().unwrap().to_string());
    }
}
