//! Waiting rooms: a queued sale's pre-queue is shuffled at the start, later buyers queue in
//! arrival order, buyers are admitted in place order, and only an admitted buyer, with its own
//! token, buys (issue 27).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use redis::AsyncCommands;
use seckill::admission::token::Signer;
use seckill::domain::{SaleId, UserId};
use seckill::limiter::Algorithm;
use seckill::redis::keys::SaleKeys;
use secrecy::SecretString;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::time::Instant;
use uuid::Uuid;

use crate::common::{ADMIN_TOKEN, Probe};
use crate::helpers::{assert_error, new_sale_id, redis_url, spawn_app, spawn_app_with, spawn_instance_of};

fn at(offset: time::Duration) -> String {
    (OffsetDateTime::now_utc() + offset).format(&Rfc3339).unwrap()
}

/// Seeds a queued sale whose pre-queue is open now and which starts in `starts_in`.
async fn seed_queued(app: &Probe, stock: i64, starts_in: time::Duration, rate: u32) -> String {
    let sale = new_sale_id();
    let body = json!({"stock": stock, "starts_at": at(starts_in), "queue": {"opens_at": at(-time::Duration::SECOND), "rate": rate}});
    let response = app.seed(&sale, body).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    sale
}

async fn join(app: &Probe, sale: &str, user: &str) -> Value {
    let url = app.url(&format!("/sales/{sale}/queue"));
    let response = app.client.post(url).query(&[("user_id", user)]).send().await.unwrap();
    assert_eq!(response.status(), 200, "{user} joins: {}", response.text().await.unwrap());
    response.json().await.unwrap()
}

async fn poll(app: &Probe, sale: &str, user: &str, ticket: Option<&str>) -> reqwest::Response {
    let mut query = vec![("user_id", user)];
    query.extend(ticket.map(|t| ("ticket", t)));
    app.client.get(app.url(&format!("/sales/{sale}/queue"))).query(&query).send().await.unwrap()
}

async fn standing(app: &Probe, sale: &str, user: &str, ticket: Option<&str>) -> Value {
    let response = poll(app, sale, user, ticket).await;
    assert_eq!(response.status(), 200, "{user} polls");
    response.json().await.unwrap()
}

async fn buy_with(app: &Probe, sale: &str, user: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = app.client.post(app.url("/buy")).json(&json!({"sale_id": sale, "user_id": user}));
    if let Some(token) = token {
        request = request.header("Seckill-Admission", token);
    }
    request.send().await.unwrap()
}

/// Polls (with its ticket) until `user` reads `state`, for at most `limit`.
async fn until_state(app: &Probe, sale: &str, user: &str, state: &str, limit: Duration) -> Value {
    let until = Instant::now() + limit;
    let mut ticket = None::<String>;
    loop {
        let answer = standing(app, sale, user, ticket.as_deref()).await;
        if answer["state"] == state {
            return answer;
        }
        assert!(Instant::now() < until, "{user} never became {state}: {answer}");
        ticket = answer["ticket"].as_str().map(str::to_owned);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the sale has started (on the server's clock, as the public status tells it).
async fn until_started(app: &Probe, sale: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let public: Value =
            app.client.get(app.url(&format!("/sales/{sale}"))).send().await.unwrap().json().await.unwrap();
        if public["state"] != "upcoming" {
            return public;
        }
        assert!(Instant::now() < until, "the sale never started: {public}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Spearman's rank correlation of two permutations of 1..=n.
fn spearman(pairs: &[(u64, u64)]) -> f64 {
    let n = pairs.len() as f64;
    let d2: f64 = pairs.iter().map(|&(a, b)| (a as f64 - b as f64).powi(2)).sum();
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

/// The test deployment's admission key (derived from the admin token, as the service does).
fn signer() -> Signer {
    let key = seckill::config::AdmissionConfig::default().key(Some(&SecretString::from(ADMIN_TOKEN))).unwrap();
    Signer::new(&key)
}

#[tokio::test]
async fn the_pre_queue_is_shuffled_fairly_and_later_arrivals_queue_in_arrival_order() {
    const EARLY: usize = 2_000;
    const LATE: usize = 500;
    let app = spawn_app().await;
    // 100 a second: the 2,500 are let in over 25 s, and the polls watch it happen (the 500 late
    // joins alone, one at a time, took 8 s on a loaded two-core host). The start is 25 s away: the
    // 2,000 early joins took over 12 s on a two-core host at load 10.
    let sale = seed_queued(&app, 10_000, time::Duration::seconds(25), 100).await;
    let before: Value = app.client.get(app.url(&format!("/sales/{sale}"))).send().await.unwrap().json().await.unwrap();
    let commitment = before["queue"]["seed_sha256"].as_str().unwrap().to_owned();
    assert!(before["queue"]["seed"].is_null(), "the seed stays secret before the start: {before}");

    // Joins in a known order (at most 16 in flight), spread over the pre-queue's window.
    let early: Vec<String> = (0..EARLY).map(|i| format!("early-{i:04}")).collect();
    let answers: Vec<Value> =
        futures::stream::iter(early.iter().map(|user| join(&app, &sale, user))).buffered(16).collect().await;
    for answer in &answers {
        assert_eq!(answer["state"], "prequeue", "{answer}");
        assert!(answer["position"].is_null() && answer["ahead"].is_null() && answer["wait_s"].is_null(), "{answer}");
    }
    let public = until_started(&app, &sale).await;
    let seed = public["queue"]["seed"].as_str().expect("the seed is public after the start").to_owned();
    assert_eq!(hex::encode(Sha256::digest(seed.as_bytes())), commitment, "the seed is the one committed to");

    // Each pre-queue ticket is exchanged once for a place (a Redis lookup), then polls carry it.
    let places: Vec<Value> = futures::stream::iter(
        early.iter().zip(&answers).map(|(user, answer)| standing(&app, &sale, user, answer["ticket"].as_str())),
    )
    .buffered(32)
    .collect()
    .await;
    let positions: Vec<u64> = places.iter().map(|p| p["position"].as_u64().expect("a place")).collect();
    assert_eq!(positions.iter().copied().collect::<BTreeSet<_>>(), (1..=EARLY as u64).collect(), "a permutation");
    let rho = spearman(&positions.iter().enumerate().map(|(i, &p)| (i as u64 + 1, p)).collect::<Vec<_>>());
    println!("join order against place: Spearman rho = {rho:.4} over {EARLY} buyers");
    assert!(rho.abs() < 0.1, "arriving early must give no edge: rho = {rho}");

    // Anyone can recompute the shuffle from the seed: places by SHA-1(seed ‖ 0 ‖ id), first 52 bits.
    let score = |user: &str| {
        let digest = <sha1::Sha1 as sha1::Digest>::digest([seed.as_bytes(), b"\0", user.as_bytes()].concat());
        u64::from_str_radix(&hex::encode(digest)[..13], 16).unwrap()
    };
    let mut by_score: Vec<&String> = early.iter().collect();
    by_score.sort_by_key(|user| (score(user), (*user).clone()));
    for (rank, user) in by_score.iter().enumerate() {
        let i = early.iter().position(|u| u == *user).unwrap();
        assert_eq!(positions[i], rank as u64 + 1, "{user}'s place is the rank of its score");
    }

    // Later buyers, one after the other: behind everyone, in their order.
    let mut line: Vec<(u64, String, String)> = early
        .iter()
        .zip(&places)
        .map(|(user, p)| (p["position"].as_u64().unwrap(), user.clone(), p["ticket"].as_str().unwrap().to_owned()))
        .collect();
    for i in 0..LATE {
        let user = format!("late-{i:03}");
        let answer = join(&app, &sale, &user).await;
        assert_eq!(answer["position"], (EARLY + i + 1) as u64, "{answer}");
        line.push(((EARLY + i + 1) as u64, user, answer["ticket"].as_str().unwrap().to_owned()));
    }

    // Admission moves in place order. Polled one at a time from the back of the line to the
    // front, a buyer seen admitted means every buyer before it, asked later (admission never
    // goes back), must be admitted too.
    line.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    let until = Instant::now() + Duration::from_secs(90);
    let mut looks = 0;
    let mut last_waiting = line.len();
    let mut seen_partly_admitted = false;
    loop {
        let mut admitted_from = None;
        let mut waiting = 0;
        for (place, user, ticket) in &mut line {
            let answer = standing(&app, &sale, user, Some(ticket)).await;
            assert_eq!(answer["position"], *place, "{user}: {answer}");
            *ticket = answer["ticket"].as_str().unwrap().to_owned();
            match answer["state"].as_str().unwrap() {
                // `closed`: admitted, and the admission lapsed unused (a minute: a slow look).
                "admitted" | "closed" => {
                    admitted_from.get_or_insert(*place);
                }
                "waiting" => {
                    assert!(admitted_from.is_none(), "{place} waits after {admitted_from:?} was admitted");
                    waiting += 1;
                }
                other => panic!("{user}: {other}: {answer}"),
            }
        }
        looks += 1;
        println!("look {looks}: {waiting} of {} waiting", line.len());
        assert!(waiting <= last_waiting, "admission went back: {waiting} wait after {last_waiting}");
        last_waiting = waiting;
        seen_partly_admitted |= waiting > 0 && waiting < line.len();
        if waiting == 0 {
            break;
        }
        assert!(Instant::now() < until, "admission stalled with {waiting} waiting");
    }
    // Seen moving, not only done: one look found the front admitted and the back still waiting
    // (the back is let in 25 s after the start; a look walks it first).
    assert!(seen_partly_admitted, "no look saw admission part way: {looks} looks");
}

/// 1,000 parallel joins of one buyer, each from its own address (10.`tag`.x.y).
async fn joins(app: &Probe, sale: &str, tag: u8) -> Vec<reqwest::Response> {
    futures::stream::iter((0..1_000u32).map(|i| {
        let request = app
            .client
            .post(app.url(&format!("/sales/{sale}/queue")))
            .query(&[("user_id", "bot")])
            .header("X-Forwarded-For", format!("10.{tag}.{}.{}", i / 250, i % 250));
        async move { request.send().await.unwrap() }
    }))
    .buffer_unordered(100)
    .collect()
    .await
}

#[tokio::test]
async fn a_bot_joining_a_thousand_times_from_many_addresses_holds_one_place() {
    let app = spawn_app_with(|c| c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()], true).await;
    let sale = seed_queued(&app, 10, time::Duration::seconds(3), 100).await;
    for response in joins(&app, &sale, 1).await {
        assert_eq!(response.status(), 200);
    }
    let keys = app.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap());
    let held: u64 = app.redis.clone().zcard(&keys.queue.prequeue).await.unwrap();
    assert_eq!(held, 1, "one pre-queue entry for 1,000 joins");
    join(&app, &sale, "human").await;
    until_started(&app, &sale).await;
    let mut positions = BTreeSet::new();
    for response in joins(&app, &sale, 2).await {
        assert_eq!(response.status(), 200);
        positions.insert(response.json::<Value>().await.unwrap()["position"].as_u64().unwrap());
    }
    assert_eq!(positions.len(), 1, "the same place every time: {positions:?}");
    // Only the human may be a late arrival (when a loaded host let it join after the start).
    let late: Vec<String> = app.redis.clone().hkeys(&keys.queue.late).await.unwrap();
    assert!(late.iter().all(|buyer| buyer == "human"), "the bot's later joins added nobody: {late:?}");
}

#[tokio::test]
async fn a_bot_that_skips_the_queue_buys_nothing() {
    let app = spawn_app().await;
    let sale = seed_queued(&app, 5, time::Duration::seconds(2), 1_000).await;
    join(&app, &sale, "alice").await;
    until_started(&app, &sale).await;
    // A second instance has never seen the sale: the script refuses the bot there.
    let cold = spawn_instance_of(&app).await;
    let forged = "1.99999999999999.00";
    let attempts = futures::stream::iter((0..300).map(|i| {
        let (target, token) = match i % 3 {
            0 => (&*app, None),
            1 => (&*cold, None),
            _ => (&*app, Some(forged)),
        };
        buy_with(target, &sale, "bot", token)
    }))
    .buffer_unordered(50)
    .collect::<Vec<_>>()
    .await;
    for response in attempts {
        assert_error(response, 403, "not_admitted").await;
    }
    assert_error(buy_with(&cold, &sale, "bot", None).await, 403, "not_admitted").await;
    let admitted = until_state(&app, &sale, "alice", "admitted", Duration::from_secs(10)).await;
    let token = admitted["admission"].as_str().unwrap();
    assert_eq!(buy_with(&app, &sale, "alice", Some(token)).await.status(), 201, "the admitted buyer buys");
    assert_error(buy_with(&cold, &sale, "alice", Some(token)).await, 409, "already_purchased").await;
    let status = app.wait_for_drain(&sale).await;
    assert_eq!((status.sold, status.stock_left, status.persisted), (1, 4, Some(1)), "only alice bought");
    assert_eq!(app.buyers(&sale).await, BTreeSet::from(["alice".to_owned()]));
    let confirmed = app.order_ids(&sale).await;
    app.assert_invariants(&sale, &confirmed).await;
}

#[tokio::test]
async fn an_admission_token_is_bound_to_its_buyer_its_sale_and_its_time() {
    let app = spawn_app().await;
    let sale = seed_queued(&app, 10, time::Duration::seconds(2), 1_000).await;
    let other_sale = seed_queued(&app, 10, time::Duration::seconds(2), 1_000).await;
    for user in ["alice", "bob"] {
        join(&app, &sale, user).await;
    }
    join(&app, &other_sale, "alice").await;
    until_started(&app, &sale).await;
    let alice = until_state(&app, &sale, "alice", "admitted", Duration::from_secs(10)).await;
    let token = alice["admission"].as_str().unwrap().to_owned();
    let elsewhere = until_state(&app, &other_sale, "alice", "admitted", Duration::from_secs(10)).await;
    let expires = OffsetDateTime::parse(alice["admission_expires_at"].as_str().unwrap(), &Rfc3339).unwrap();
    assert!(expires > OffsetDateTime::now_utc() + time::Duration::seconds(50), "the default 60 s: {alice}");

    let mut flipped = token.clone().into_bytes();
    let last = flipped.last_mut().unwrap();
    *last = if *last == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();
    let (sale_id, alice_id) = (SaleId::parse(&sale).unwrap(), UserId::parse("alice").unwrap());
    let place = alice["position"].as_u64().unwrap();
    let past = (OffsetDateTime::now_utc().unix_timestamp() as u64 - 1) * 1000;
    let expired = signer().admission(&sale_id, &alice_id, place, past);
    for (what, user, token) in [
        ("forged", "alice", flipped.as_str()),
        ("malformed", "alice", "not-a-token"),
        ("another buyer's", "bob", token.as_str()),
        ("another sale's", "alice", elsewhere["admission"].as_str().unwrap()),
        ("expired", "alice", expired.as_str()),
    ] {
        let response = buy_with(&app, &sale, user, Some(token)).await;
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "not_admitted", "{what}: {body}");
        let expired = body["message"].as_str().is_some_and(|m| m.contains("expired"));
        assert_eq!(expired, what == "expired", "{what}: the answer says why: {body}");
    }
    assert_eq!(app.status(&sale).await.sold, 0, "none of them bought");
    assert_eq!(buy_with(&app, &sale, "alice", Some(&token)).await.status(), 201, "her own token buys");
    // A ticket is no admission token, nor the other way round.
    let ticket = alice["ticket"].as_str().unwrap();
    let body: Value = buy_with(&app, &sale, "bob", Some(ticket)).await.json().await.unwrap();
    assert_eq!(body["error"], "not_admitted", "{body}");
}

/// An admission ends by Redis time, the clock `lua/admit.lua` admits the next buyers by, and the
/// purchase scripts judge it against Redis `TIME`, not the instance's clock (which may be behind
/// Redis's and let a buyer in after the line let the next one in): called directly, each refuses
/// a place whose end Redis's clock has reached, with nothing written, and takes one it has not.
#[tokio::test]
async fn an_admission_ends_by_the_redis_clock_in_both_purchase_scripts() {
    let app = spawn_app_with(|_| {}, false).await; // no worker: the entries stay in the stream
    let mut redis = seckill::redis::connection::connect(&redis_url().into(), Duration::from_secs(5)).unwrap();
    for batch in [false, true] {
        let sale = new_sale_id();
        assert_eq!(app.seed(&sale, json!({"stock": 5})).await.status(), 200);
        let keys = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap());
        let _: () = redis.hset(&keys.meta, "queue_rate", 100).await.unwrap();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut redis).await.unwrap();
        let now_ms = secs * 1000 + micros / 1000;
        for (user, expires_ms, expected) in [
            ("reached", now_ms, "admission_expired"),
            ("passed", now_ms - 1, "admission_expired"),
            ("bare place", 0, "not_admitted"),
            ("timely", now_ms + 600_000, "ok"),
        ] {
            let place = if user == "bare place" { "7".to_owned() } else { format!("7.{expires_ms}") };
            let user = user.replace(' ', "-");
            let order = Uuid::now_v7().to_string();
            let reply: redis::Value = if batch {
                let mut call = Algorithm::SlidingLog.with_purchases().key(&keys.all()[..]);
                call.arg(&sale).arg(1).arg(1).arg(&user).arg(&order).arg(&place).arg("").arg(1).arg("").arg(0);
                let mut replies: Vec<redis::Value> = call.invoke_async(&mut redis).await.unwrap();
                replies.remove(0)
            } else {
                let mut call = seckill::redis::lua::BUY.key(&keys.all()[..]);
                call.arg(&sale).arg(&user).arg(&order).arg(1).arg(&place).arg("");
                call.invoke_async(&mut redis).await.unwrap()
            };
            let reply: String = redis::from_redis_value(reply).unwrap();
            assert_eq!(reply, expected, "{user}, batch {batch}: place {place}, Redis time {now_ms}");
        }
        let stock: i64 = redis.get(&keys.stock).await.unwrap();
        let buyers: BTreeSet<String> = redis.smembers(&keys.buyers).await.unwrap();
        let places: Vec<String> = redis.zrange(&keys.queue.bought, 0, -1).await.unwrap();
        let entries: usize = redis.xlen(&keys.orders).await.unwrap();
        assert_eq!(
            (stock, buyers, places, entries),
            (4, BTreeSet::from(["timely".to_owned()]), vec!["timely".to_owned()], 1)
        );
    }
}

#[tokio::test]
async fn admission_waits_for_stock_and_an_unused_admission_lapses_for_good() {
    let app = spawn_app_with(|c| c.admission.admission_ttl = Duration::from_secs(5), true).await;
    // One unit: at most ceil(1 × 2) = 2 admitted buyers who have not bought.
    let sale = new_sale_id();
    let body = json!({"stock": 1, "starts_at": at(time::Duration::seconds(2)), "payment_window": "1m",
                      "queue": {"opens_at": at(-time::Duration::SECOND), "rate": 1000}});
    assert_eq!(app.seed(&sale, body).await.status(), 200);
    until_started(&app, &sale).await;
    let users = ["p1", "p2", "p3", "p4"];
    for (i, user) in users.iter().enumerate() {
        assert_eq!(join(&app, &sale, user).await["position"], i as u64 + 1);
    }
    let first = until_state(&app, &sale, "p1", "admitted", Duration::from_secs(10)).await;
    until_state(&app, &sale, "p2", "admitted", Duration::from_secs(10)).await;
    // Well past the rate's time for four, p3 still waits: two unused admissions cover the one unit.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(standing(&app, &sale, "p3", None).await["state"], "waiting");

    let token = first["admission"].as_str().unwrap();
    assert_eq!(buy_with(&app, &sale, "p1", Some(token)).await.status(), 201);
    let sold_out = until_state(&app, &sale, "p3", "sold_out", Duration::from_secs(10)).await;
    assert_eq!(sold_out["position"], 3, "{sold_out}");
    // p1 gives the unit back: admission resumes.
    let cancel = app.cancel(&sale, "p1").await;
    assert_eq!(cancel.status(), 200, "{}", cancel.text().await.unwrap());
    until_state(&app, &sale, "p3", "admitted", Duration::from_secs(10)).await;

    // p2 lets its admission lapse: closed, no second token, its old one refused; p4 moves up.
    let p2 = until_state(&app, &sale, "p2", "closed", Duration::from_secs(15)).await;
    assert!(p2.get("admission").is_none(), "{p2}");
    assert_eq!(p2["position"], 2, "{p2}");
    let lapsed = join(&app, &sale, "p2").await;
    assert_eq!((lapsed["state"].as_str(), lapsed.get("admission")), (Some("closed"), None), "joining again: {lapsed}");
    until_state(&app, &sale, "p4", "admitted", Duration::from_secs(15)).await;
    let status = app.wait_for_drain(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold, status.released), (1, 1, 1, 1));
}

#[tokio::test]
async fn the_waiting_room_refuses_what_it_cannot_serve() {
    let app = spawn_app().await;
    let open = new_sale_id();
    app.seed_stock(&open, 1).await;
    let sale = new_sale_id();
    let starts = at(time::Duration::minutes(10));
    for (body, why) in [
        (json!({"stock": 1, "queue": {"opens_at": at(time::Duration::ZERO), "rate": 5}}), "no starts_at"),
        (
            json!({"stock": 1, "starts_at": starts, "queue": {"opens_at": at(time::Duration::minutes(11)), "rate": 5}}),
            "opens after the start",
        ),
        (
            json!({"stock": 1, "starts_at": starts, "queue": {"opens_at": at(time::Duration::ZERO), "rate": 0}}),
            "rate 0",
        ),
        (
            json!({"stock": 1, "starts_at": starts, "shards": 2, "queue": {"opens_at": at(time::Duration::ZERO), "rate": 5}}),
            "shards",
        ),
        (
            json!({"stock": 1, "starts_at": starts, "queue": {"opens_at": at(time::Duration::ZERO), "rate": 5, "extra": 1}}),
            "unknown field",
        ),
    ] {
        let response = app.seed(&sale, body).await;
        assert_eq!(response.status(), 400, "{why}: {}", response.text().await.unwrap());
    }
    let later =
        json!({"stock": 1, "starts_at": starts, "queue": {"opens_at": at(time::Duration::minutes(5)), "rate": 5}});
    assert_eq!(app.seed(&sale, later).await.status(), 200);
    let url = app.url(&format!("/sales/{sale}/queue"));
    let early = app.client.post(&url).query(&[("user_id", "alice")]).send().await.unwrap();
    assert_error(early, 403, "queue_not_open").await;
    assert_error(poll(&app, &sale, "alice", None).await, 404, "not_in_queue").await;
    assert_error(poll(&app, &sale, "alice", Some("0.00")).await, 404, "not_in_queue").await;
    assert_error(buy_with(&app, &sale, "alice", None).await, 403, "not_admitted").await;
    let cold = spawn_instance_of(&app).await;
    assert_error(buy_with(&cold, &sale, "alice", None).await, 403, "not_admitted").await;

    let response =
        app.client.post(app.url(&format!("/sales/{open}/queue"))).query(&[("user_id", "a")]).send().await.unwrap();
    assert_error(response, 409, "not_queued").await;
    assert_error(poll(&app, "no-such-sale", "alice", None).await, 404, "unknown_sale").await;
    assert_eq!(app.buy(&open, "a").await.status(), 201, "a sale without a queue sells as before");
}

#[tokio::test]
async fn a_queued_sale_lost_by_redis_comes_back_queued() {
    let app = spawn_app().await;
    let sale = seed_queued(&app, 3, time::Duration::seconds(1), 100).await;
    let keys = app.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap());
    let seed_before: String = app.redis.clone().hget(&keys.queue.state, "seed").await.unwrap();
    until_started(&app, &sale).await;
    let mut redis = app.redis.clone();
    for key in keys.every() {
        let _: () = redis.del(key).await.unwrap();
    }
    let response = app
        .client
        .post(app.url(&format!("/admin/sales/{sale}/reconcile")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let seed_after: String = redis.hget(&keys.queue.state, "seed").await.unwrap();
    assert_eq!(seed_after, seed_before, "the published seed comes back with the sale");
    let mut refused = None;
    for _ in 0..50 {
        let response = app.buy(&sale, "bot").await;
        if response.status() != 404 {
            refused = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_error(refused.expect("the sale is back"), 403, "not_admitted").await;
}

#[tokio::test]
async fn a_paused_queued_sale_admits_nobody_until_it_resumes_and_a_top_up_lets_admission_move_again() {
    let app = spawn_app().await;
    let sale = seed_queued(&app, 1, time::Duration::seconds(2), 1000).await;
    let admin = |action: &str| {
        let url = app.url(&format!("/admin/sales/{sale}/{action}"));
        app.client.post(url).bearer_auth(ADMIN_TOKEN)
    };
    assert_eq!(admin("pause").send().await.unwrap().status(), 200);
    until_started(&app, &sale).await;
    assert_eq!(join(&app, &sale, "p1").await["position"], 1);
    tokio::time::sleep(Duration::from_millis(600)).await; // far past the rate's time for one
    assert_eq!(standing(&app, &sale, "p1", None).await["state"], "waiting", "paused: nobody is admitted");

    assert_eq!(admin("resume").send().await.unwrap().status(), 200);
    let p1 = until_state(&app, &sale, "p1", "admitted", Duration::from_secs(20)).await;
    assert_eq!(buy_with(&app, &sale, "p1", p1["admission"].as_str()).await.status(), 201);
    assert_eq!(join(&app, &sale, "p2").await["position"], 2);
    until_state(&app, &sale, "p2", "sold_out", Duration::from_secs(20)).await;

    let top_up = admin("stock").json(&json!({"add": 1})).send().await.unwrap();
    assert_eq!(top_up.status(), 200);
    let p2 = until_state(&app, &sale, "p2", "admitted", Duration::from_secs(20)).await;
    assert_eq!(buy_with(&app, &sale, "p2", p2["admission"].as_str()).await.status(), 201);
    let status = app.wait_for_drain(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold), (2, 0, 2));
}

/// After the end (here by the kill switch), a join and an ask without a ticket are refused 403
/// `sale_ended`, while a poll with a placed ticket, answered from the instance's read of the line,
/// reads `closed` (docs/waiting-room.md says both).
#[tokio::test]
async fn an_ended_sale_refuses_joins_and_asks_and_a_ticket_reads_closed() {
    let app = spawn_app().await;
    let sale = seed_queued(&app, 5, time::Duration::SECOND, 1000).await;
    join(&app, &sale, "alice").await;
    join(&app, &sale, "bob").await;
    until_started(&app, &sale).await;
    let placed = until_state(&app, &sale, "alice", "admitted", Duration::from_secs(30)).await;
    let ticket = placed["ticket"].as_str().unwrap().to_owned();
    let end = app.client.post(app.url(&format!("/admin/sales/{sale}/end"))).bearer_auth(ADMIN_TOKEN);
    assert_eq!(end.send().await.unwrap().status(), 200);

    let late = app.client.post(app.url(&format!("/sales/{sale}/queue"))).query(&[("user_id", "carol")]);
    assert_error(late.send().await.unwrap(), 403, "sale_ended").await;
    assert_error(poll(&app, &sale, "bob", None).await, 403, "sale_ended").await;
    assert_error(poll(&app, &sale, "alice", None).await, 403, "sale_ended").await;
    // The instance reads the line again within a tick (200 ms): then the ticket's answer is closed.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = standing(&app, &sale, "alice", Some(&ticket)).await;
        if answer["state"] == "closed" {
            assert_eq!(answer.get("admission"), None, "no token after the end: {answer}");
            break;
        }
        assert!(Instant::now() < until, "the ticket never read closed: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A ticket holds only in the line that gave it: one signed for an earlier line of the same name
/// (another shuffle seed: a drop seeded again under its name after its retirement) is not
/// trusted, and the buyer's standing is read from Redis instead.
#[tokio::test]
async fn a_ticket_of_an_earlier_line_of_the_same_name_is_not_trusted() {
    let app = spawn_app().await;
    let sale = seed_queued(&app, 10, time::Duration::MINUTE, 100).await;
    join(&app, &sale, "alice").await;
    let id = SaleId::parse(&sale).unwrap();
    // A ticket binds the line's seed and its state's epoch (lua/admit.lua).
    let state = app.store.keyspace().sale_keys(&id).queue.state;
    let (seed, epoch): (String, String) =
        redis::cmd("HMGET").arg(&state).arg("seed").arg("epoch").query_async(&mut app.redis.clone()).await.unwrap();
    let bob = UserId::parse("bob").unwrap();
    let this_line = signer().ticket((&id).into(), &format!("{seed}/{epoch}"), &bob, 0);
    let answer = standing(&app, &sale, "bob", Some(&this_line)).await;
    assert_eq!(answer["state"], "prequeue", "a ticket of this line is trusted as signed: {answer}");
    let earlier_line = signer().ticket((&id).into(), &"0".repeat(64), &bob, 0);
    assert_error(poll(&app, &sale, "bob", Some(&earlier_line)).await, 404, "not_in_queue").await;
}

/// A queued sale Redis lost, restored by the repair with the same shuffle seed but none of its
/// places: a ticket from before the loss is not trusted (its line's state has a new epoch), and
/// the buyer is told what Redis holds, as without a ticket: not in the queue.
#[tokio::test]
async fn a_ticket_from_before_a_loss_is_not_trusted_by_the_restored_line() {
    let app = spawn_app().await;
    let sale = seed_queued(&app, 10, time::Duration::MINUTE, 100).await;
    let joined = join(&app, &sale, "alice").await;
    let ticket = joined["ticket"].as_str().unwrap().to_owned();
    let trusted = standing(&app, &sale, "alice", Some(&ticket)).await;
    assert_eq!(trusted["state"], "prequeue", "{trusted}");
    let id = SaleId::parse(&sale).unwrap();
    let keys = app.store.keyspace().sale_keys(&id);
    let mut redis = app.redis.clone();
    for key in keys.every() {
        let _: i64 = redis.del(key).await.unwrap();
    }
    crate::redis_loss::repair(&app, &sale).await;
    assert_error(poll(&app, &sale, "alice", None).await, 404, "not_in_queue").await;
    // The instance's read of the line is at most 200 ms old: wait for the restored one.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let response = poll(&app, &sale, "alice", Some(&ticket)).await;
        if response.status() == 404 {
            assert_error(response, 404, "not_in_queue").await;
            break;
        }
        let answer: Value = response.json().await.unwrap();
        assert!(Instant::now() < until, "the ticket from before the loss is still trusted: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A queued sale the repair holds (its `restoring` mark: an operator's resume lifts only the
/// pause) admits nobody, as a paused one: its buyers' windows would otherwise run while their
/// purchases are refused. Once the hold is lifted admission moves.
#[tokio::test]
async fn a_queued_sale_the_repair_holds_admits_nobody_until_the_hold_is_lifted() {
    let app = spawn_app().await;
    let sale = seed_queued(&app, 10, time::Duration::seconds(2), 100).await;
    join(&app, &sale, "alice").await;
    let id = SaleId::parse(&sale).unwrap();
    let meta = app.store.keyspace().sale_keys(&id).meta;
    let _: () = app.redis.clone().hset(&meta, "restoring", "1").await.unwrap();
    let starts_at = until_started(&app, &sale).await["starts_at"].as_str().map(str::to_owned).unwrap();
    let starts_at = OffsetDateTime::parse(&starts_at, &Rfc3339).unwrap();
    // A line read a second after the start, at 100 a second, would have admitted her.
    let until = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        let answer = standing(&app, &sale, "alice", None).await;
        let read_at = OffsetDateTime::parse(answer["server_time"].as_str().unwrap(), &Rfc3339).unwrap();
        if read_at >= starts_at + time::Duration::SECOND {
            break answer;
        }
        assert!(Instant::now() < until, "no line read a second after the start: {answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answer["state"], "waiting", "held: nobody admitted: {answer}");
    seckill::controls::lift_hold(&app.store, &id, seckill::reconcile::REPAIR_HOLD).await.unwrap();
    until_state(&app, &sale, "alice", "admitted", Duration::from_secs(20)).await;
}

/// A queued sale's seed that failed after its Redis call (Postgres cancelled the audit's insert:
/// the row rolled back) left Redis a shuffle seed no row got; the seed sent again keeps Redis's in
/// the row (its SHA-256 is the one published, the line is shuffled with it), where the row had
/// drawn another for good.
#[tokio::test]
async fn a_queued_seed_sent_again_after_a_failed_commit_keeps_the_shuffle_seed_redis_keeps() {
    let app = spawn_app_with(|c| c.database.statement_timeout = Duration::from_secs(1), false).await;
    let sale = new_sale_id();
    let queue = json!({"opens_at": at(-time::Duration::SECOND), "rate": 10});
    let body = json!({"stock": 5, "starts_at": at(time::Duration::HOUR), "queue": queue});
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("lock table sale_audit in exclusive mode").execute(&mut *holder).await.unwrap();
    assert_error(app.seed(&sale, body.clone()).await, 503, "unavailable").await;
    holder.rollback().await.unwrap();
    assert_eq!(app.seed(&sale, body).await.status(), 200);

    let row: Vec<u8> = sqlx::query_scalar("select queue_seed from sales where sale_id = $1")
        .bind(&sale)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let keys = seckill::redis::keys::SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap());
    let kept: String = app.redis.clone().hget(&keys.meta, "queue_seed").await.unwrap();
    assert_eq!(hex::encode(row), kept);

    // A drop's line alike.
    let drop = format!("drop-{}", &uuid::Uuid::now_v7().simple().to_string()[..20]);
    let body = json!({"sizes": {"40": {"stock": 2}}, "starts_at": at(time::Duration::HOUR), "waiting_room": queue});
    let put = || app.client.put(app.url(&format!("/admin/drops/{drop}"))).bearer_auth(ADMIN_TOKEN).json(&body).send();
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("lock table sale_audit in exclusive mode").execute(&mut *holder).await.unwrap();
    assert_error(put().await.unwrap(), 503, "unavailable").await;
    holder.rollback().await.unwrap();
    assert_eq!(put().await.unwrap().status(), 200);
    let row: Vec<u8> = sqlx::query_scalar("select line_seed from drops where drop_id = $1")
        .bind(&drop)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let keys =
        seckill::redis::keys::DropKeys::new(&app.config.key_prefix, &seckill::domain::DropId::parse(&drop).unwrap());
    let kept: String = app.redis.clone().hget(&keys.line_state, "seed").await.unwrap();
    assert_eq!(hex::encode(row), kept);
}
