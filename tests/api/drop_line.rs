//! One line and one door per drop (issue 52): a buyer joins the drop's line once (one proof of
//! work if asked) and its one admission token buys any size `<drop>.<size>`, within the drop's
//! `per_buyer`; no token passes for another line's, either way.

use std::time::Duration;

use redis::AsyncCommands;
use seckill::admission::Subject;
use seckill::admission::token::Signer;
use seckill::domain::UserId;
use seckill::redis::keys::LineKeys;
use secrecy::SecretString;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::time::Instant;

use crate::common::drops::{new_drop_id, put_drop, seed_drop_line, seed_drop_sizes, sized};
use crate::common::{ADMIN_TOKEN, Probe};
use crate::helpers::{spawn_app, spawn_app_with};

/// The test deployment's admission key (derived from the admin token, as the service does).
fn signer() -> Signer {
    let key = seckill::config::AdmissionConfig::default().key(Some(&SecretString::from(ADMIN_TOKEN))).unwrap();
    Signer::new(&key)
}

async fn join(app: &Probe, drop: &str, user: &str, proof: Option<&str>) -> reqwest::Response {
    let mut request = app.client.post(app.url(&format!("/drops/{drop}/queue"))).query(&[("user_id", user)]);
    if let Some(proof) = proof {
        request = request.header("Seckill-Challenge", proof);
    }
    request.send().await.unwrap()
}

/// Joins and polls the drop's line until `user` is admitted: its answer.
pub(crate) async fn admitted(app: &Probe, drop: &str, user: &str) -> Value {
    let response = join(app, drop, user, None).await;
    assert_eq!(response.status(), 200, "{user} joins: {}", response.text().await.unwrap());
    let mut answer: Value = response.json().await.unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while answer["state"] != "admitted" {
        assert!(Instant::now() < until, "{user} never admitted: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let url = app.url(&format!("/drops/{drop}/queue"));
        let ticket = answer["ticket"].as_str().unwrap().to_owned();
        let response = app.client.get(url).query(&[("user_id", user), ("ticket", &ticket)]).send().await.unwrap();
        assert_eq!(response.status(), 200);
        answer = response.json().await.unwrap();
    }
    answer
}

pub(crate) async fn buy_with(app: &Probe, sale: &str, user: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = app.client.post(app.url("/buy")).json(&json!({"sale_id": sale, "user_id": user}));
    if let Some(token) = token {
        request = request.header("Seckill-Admission", token);
    }
    request.send().await.unwrap()
}

pub(crate) async fn refused_with(response: reqwest::Response, status: u16, code: &str, what: &str) -> Value {
    assert_eq!(response.status(), status, "{what}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], code, "{what}: {body}");
    body
}

#[tokio::test]
async fn one_join_of_the_drops_line_buys_any_size_within_the_drops_limit() {
    let app = spawn_app().await;
    let drop = seed_drop_line(&app, &["40", "41", "42"], 5, 2, (1000, None)).await;
    let alice = admitted(&app, &drop, "alice").await;
    let token = alice["admission"].as_str().unwrap();
    assert!(token.starts_with('d'), "a drop's token is marked: {alice}");
    let again: Value = join(&app, &drop, "alice", None).await.json().await.unwrap();
    assert_eq!(again["position"], alice["position"], "a second join keeps the one place");

    assert_eq!(buy_with(&app, &format!("{drop}.40"), "alice", Some(token)).await.status(), 201);
    assert_eq!(buy_with(&app, &format!("{drop}.41"), "alice", Some(token)).await.status(), 201, "another size");
    let over = buy_with(&app, &format!("{drop}.42"), "alice", Some(token)).await;
    refused_with(over, 409, "limit_reached", "a third unit across the drop").await;
    let twice = buy_with(&app, &format!("{drop}.40"), "alice", Some(token)).await;
    refused_with(twice, 409, "already_purchased", "a size twice").await;

    // Her purchases are the line's (admit.lua counts them used), not the sizes' own lines'.
    let line = LineKeys::of_drop(app.store.keyspace().prefix(), &drop);
    let place: Option<f64> = app.redis.clone().zscore(&line.queue.bought, "alice").await.unwrap();
    assert_eq!(place, alice["position"].as_f64(), "the place the token carries, in the line's buyers");
    for size in ["40", "41"] {
        assert_eq!(app.status(&format!("{drop}.{size}")).await.sold, 1, "{size}");
    }
    // The line's stock is the drop's: 15 seeded, 2 sold.
    let bob = admitted(&app, &drop, "bob").await;
    assert_eq!(buy_with(&app, &format!("{drop}.42"), "bob", bob["admission"].as_str()).await.status(), 201);
}

/// A drop's line is audited as a queued sale's (docs/waiting-room.md, "Audit your place"):
/// `GET /drops/{drop}` commits to the shuffle seed before the start and shows it after, and every
/// pre-queue place is the rank of SHA-1(seed ‖ 0 ‖ buyer)'s first 52 bits.
#[tokio::test]
async fn a_drops_line_publishes_its_shuffle_seed_and_every_pre_queue_place_follows_from_it() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let now = OffsetDateTime::now_utc();
    let at = |seconds: i64| (now + time::Duration::seconds(seconds)).format(&Rfc3339).unwrap();
    let body = json!({"sizes": sized(&["40", "41"], 50), "per_buyer": 1, "starts_at": at(4),
                      "waiting_room": {"opens_at": at(-1), "rate": 1000}, "challenge": {"cost": 0}});
    put_drop(&app, &drop, body).await;
    let view = async || -> Value {
        let response = app.client.get(app.url(&format!("/drops/{drop}"))).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    };
    let before = view().await;
    let commitment = before["line"]["seed_sha256"].as_str().expect("the commitment, from the seed on").to_owned();
    assert!(before["line"]["seed"].is_null(), "the seed stays secret before the start: {before}");
    assert_eq!(before["line"]["rate"], 1000, "{before}");

    let buyers: Vec<String> = (0..24).map(|i| format!("early-{i:02}")).collect();
    let mut tickets = vec![];
    for user in &buyers {
        let response = join(&app, &drop, user, None).await;
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["state"], "prequeue", "{user} joined before the start: {answer}");
        tickets.push(answer["ticket"].as_str().unwrap().to_owned());
    }
    let until = Instant::now() + Duration::from_secs(30);
    let seed = loop {
        let after = view().await;
        if let Some(seed) = after["line"]["seed"].as_str() {
            assert_eq!(after["line"]["seed_sha256"], commitment.as_str(), "{after}");
            break seed.to_owned();
        }
        assert!(Instant::now() < until, "the seed never shown after the start: {after}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(hex::encode(Sha256::digest(seed.as_bytes())), commitment, "the seed is the one committed to");

    let score = |user: &str| {
        let digest = <sha1::Sha1 as sha1::Digest>::digest([seed.as_bytes(), b"\0", user.as_bytes()].concat());
        u64::from_str_radix(&hex::encode(digest)[..13], 16).unwrap()
    };
    let mut by_score: Vec<&String> = buyers.iter().collect();
    by_score.sort_by_key(|user| (score(user), (*user).clone()));
    for (user, ticket) in buyers.iter().zip(&tickets) {
        let url = app.url(&format!("/drops/{drop}/queue"));
        let response =
            app.client.get(url).query(&[("user_id", user.as_str()), ("ticket", ticket)]).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        let rank = by_score.iter().position(|u| *u == user).unwrap() as u64 + 1;
        assert_eq!(answer["position"], rank, "{user}'s place is the rank of its score: {answer}");
    }
}

/// While the repair holds a drop's sizes (a lost size seeded again, its buyers not yet back), the
/// drop's line admits nobody to them: their stock counts for nothing, as a held sale's line admits
/// nobody. Admitted to it, a buyer would only have been refused `sale_paused` until her one
/// window closed. Once the hold is lifted, she is admitted.
#[tokio::test]
async fn a_drops_line_admits_nobody_to_sizes_the_repair_holds() {
    let app = spawn_app().await;
    let drop = seed_drop_line(&app, &["40", "41"], 5, 2, (1000, None)).await;
    let sizes: Vec<seckill::domain::SaleId> =
        ["40", "41"].iter().map(|size| seckill::domain::SaleId::parse(&format!("{drop}.{size}")).unwrap()).collect();
    for size in &sizes {
        let meta = app.store.keyspace().sale_keys(size).meta;
        let _: () = app.redis.clone().hset(&meta, "restoring", "1").await.unwrap();
    }
    let response = join(&app, &drop, "alice", None).await;
    assert_eq!(response.status(), 200);
    let joined: Value = response.json().await.unwrap();
    let ticket = joined["ticket"].as_str().unwrap().to_owned();
    let read = || async {
        let url = app.url(&format!("/drops/{drop}/queue"));
        let response = app.client.get(url).query(&[("user_id", "alice"), ("ticket", &ticket)]).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.unwrap()
    };
    let time = |answer: &Value| OffsetDateTime::parse(answer["server_time"].as_str().unwrap(), &Rfc3339).unwrap();
    // A line read a second after her join, at 1,000 a second, would have admitted her.
    let joined_at = time(&joined);
    let until = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        let answer = read().await;
        if time(&answer) >= joined_at + time::Duration::SECOND {
            break answer;
        }
        assert!(Instant::now() < until, "no line read a second after the join: {answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answer["state"], "waiting", "both sizes held: nobody admitted: {answer}");
    for size in &sizes {
        seckill::controls::lift_hold(&app.store, size, seckill::reconcile::REPAIR_HOLD).await.unwrap();
    }
    let until = Instant::now() + Duration::from_secs(20);
    while read().await["state"] != "admitted" {
        assert!(Instant::now() < until, "not admitted once the hold was lifted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn no_token_passes_for_another_lines_and_nobody_buys_a_size_without_one() {
    let app = spawn_app().await;
    let drop = seed_drop_line(&app, &["40", "41"], 5, 2, (1000, None)).await;
    let other_drop = seed_drop_line(&app, &["40"], 5, 2, (1000, None)).await;
    let size = format!("{drop}.40");
    let alice = admitted(&app, &drop, "alice").await;
    let token = alice["admission"].as_str().unwrap().to_owned();
    let elsewhere = admitted(&app, &other_drop, "alice").await;
    let alice_id = UserId::parse("alice").unwrap();
    let place = alice["position"].as_u64().unwrap();
    let past = (OffsetDateTime::now_utc().unix_timestamp() as u64 - 1) * 1000;
    let expired = signer().admission(Subject { drop: true, id: &drop }, &alice_id, place, past);
    // A sale's token of the size itself (a sale's label, unmarked): only a size queued alone takes it.
    let size_id = seckill::domain::SaleId::parse(&size).unwrap();
    let sale_token = signer().admission(&size_id, &alice_id, place, past + 120_000);
    // The drop's token unmarked, and a sale token marked: neither verifies.
    let unmarked = token.trim_start_matches('d').to_owned();
    let marked_sale = format!("d{sale_token}");
    for (what, user, token) in [
        ("none", "alice", None),
        ("another buyer's", "bob", Some(token.as_str())),
        ("another drop's", "alice", elsewhere["admission"].as_str()),
        ("expired", "alice", Some(expired.as_str())),
        ("a sale token of the size", "alice", Some(sale_token.as_str())),
        ("unmarked", "alice", Some(unmarked.as_str())),
        ("a sale token marked", "alice", Some(marked_sale.as_str())),
        ("a ticket", "alice", alice["ticket"].as_str()),
    ] {
        refused_with(buy_with(&app, &size, user, token).await, 403, "not_admitted", what).await;
    }
    assert_eq!(app.status(&size).await.sold, 0, "none of them bought");

    // A drop's token on a sale queued alone (a grouped sale with its own line, and one without a
    // group): refused, by the script and in process.
    let group = new_drop_id();
    let queued_alone = format!("{group}.40");
    let now = OffsetDateTime::now_utc();
    let at = |offset: time::Duration| (now + offset).format(&time::format_description::well_known::Rfc3339).unwrap();
    let body = json!({"stock": 5, "starts_at": at(time::Duration::seconds(-1)),
        "queue": {"opens_at": at(time::Duration::seconds(-2)), "rate": 1000}});
    let response = app.seed(&queued_alone, body.clone()).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let forged_for_group = signer().admission(Subject { drop: true, id: &group }, &alice_id, 1, past + 120_000);
    let response = buy_with(&app, &queued_alone, "alice", Some(&forged_for_group)).await;
    refused_with(response, 403, "not_admitted", "a drop token on a size queued alone").await;
    let alone = crate::common::new_sale_id();
    assert_eq!(app.seed(&alone, body).await.status(), 200);
    let response = buy_with(&app, &alone, "alice", Some(&token)).await;
    refused_with(response, 403, "not_admitted", "a drop token on a sale without a group").await;
    assert_eq!(app.status(&queued_alone).await.sold + app.status(&alone).await.sold, 0);

    assert_eq!(buy_with(&app, &size, "alice", Some(&token)).await.status(), 201, "her own token buys");
}

#[tokio::test]
async fn a_size_of_a_drop_has_no_line_of_its_own_and_made_up_drops_are_unknown() {
    let app = spawn_app().await;
    let drop = seed_drop_line(&app, &["40"], 5, 1, (1000, None)).await;
    let size_queue = app.url(&format!("/sales/{drop}.40/queue"));
    let response = app.client.post(&size_queue).query(&[("user_id", "alice")]).send().await.unwrap();
    let body = refused_with(response, 409, "drop_line", "joining a size").await;
    assert!(body["message"].as_str().unwrap().contains(&format!("/drops/{drop}/queue")), "{body}");
    let response = app.client.get(&size_queue).query(&[("user_id", "alice")]).send().await.unwrap();
    refused_with(response, 409, "drop_line", "asking a size").await;

    refused_with(join(&app, &new_drop_id(), "alice", None).await, 404, "unknown_drop", "a made-up drop").await;
    refused_with(join(&app, &format!("{drop}.40"), "alice", None).await, 400, "invalid_request", "a size id").await;
    let url = app.url(&format!("/drops/{}/queue", new_drop_id()));
    let response = app.client.get(url).query(&[("user_id", "alice")]).send().await.unwrap();
    refused_with(response, 404, "unknown_drop", "asking a made-up drop").await;
    let without_line = seed_drop_sizes(&app, &["40"], 5, 1).await;
    refused_with(join(&app, &without_line, "alice", None).await, 409, "not_queued", "a drop without a line").await;
    let asked: Value = join(&app, &drop, "bob", None).await.json().await.unwrap();
    let url = app.url(&format!("/drops/{drop}/queue"));
    let response = app.client.get(url).query(&[("user_id", "carol")]).send().await.unwrap();
    refused_with(response, 404, "not_in_queue", "carol never joined").await;
    assert!(asked["position"].as_u64().is_some(), "{asked}");
}

#[tokio::test]
async fn a_drop_asks_one_proof_of_work_per_join_not_one_per_size() {
    let app = spawn_app_with(
        |c| {
            c.challenge.challenge_iterations = 10;
        },
        true,
    )
    .await;
    let drop = seed_drop_line(&app, &["40", "41"], 5, 2, (1000, Some(10))).await;
    refused_with(join(&app, &drop, "alice", None).await, 403, "challenge_required", "no solution").await;
    let url = app.url(&format!("/drops/{drop}/challenge"));
    let view: Value = app.client.get(&url).query(&[("user_id", "alice")]).send().await.unwrap().json().await.unwrap();
    assert_eq!(view["parameters"]["data"]["sale"], format!("drop:{drop}"), "bound to the drop's line: {view}");
    let solved =
        seckill::challenge::solve::solve(&serde_json::to_vec(&view).unwrap(), Duration::from_secs(60)).unwrap();
    // The drop's solution is not a size's (a size asks none of its own: the join asked it).
    let size_join = app.url(&format!("/sales/{drop}.40/queue"));
    let response =
        app.client.post(&size_join).query(&[("user_id", "alice")]).header("Seckill-Challenge", &solved.header);
    refused_with(response.send().await.unwrap(), 409, "drop_line", "a size's join").await;
    let response = join(&app, &drop, "alice", Some(&solved.header)).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let first: Value = response.json().await.unwrap();
    // The same solution again (her join sent again): the place she has, nothing spent.
    let again: Value = join(&app, &drop, "alice", Some(&solved.header)).await.json().await.unwrap();
    assert_eq!((&again["state"], &again["position"]), (&first["state"], &first["position"]), "{again}");
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let solved_once = r#"seckill_challenges_total{cost="1",event="solved"} 1"#;
    assert!(metrics.lines().any(|l| l == solved_once), "{solved_once} in /metrics");
    // Admitted once, she buys two sizes with no further work.
    let url = app.url(&format!("/drops/{drop}/queue"));
    let until = Instant::now() + Duration::from_secs(10);
    let token = loop {
        let answer: Value =
            app.client.get(&url).query(&[("user_id", "alice")]).send().await.unwrap().json().await.unwrap();
        if let Some(token) = answer["admission"].as_str() {
            break token.to_owned();
        }
        assert!(Instant::now() < until, "never admitted: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for size in ["40", "41"] {
        assert_eq!(buy_with(&app, &format!("{drop}.{size}"), "alice", Some(&token)).await.status(), 201, "{size}");
    }
    // A sale asks none for a drop: its challenge route says so, its own door has no cost.
    let url = app.url(&format!("/drops/{}/challenge", seed_drop_line(&app, &["1"], 1, 1, (10, None)).await));
    let response = app.client.get(url).query(&[("user_id", "alice")]).send().await.unwrap();
    refused_with(response, 409, "no_challenge", "a line without a proof of work").await;
}

#[tokio::test]
async fn a_drops_line_goes_with_its_last_retired_size() {
    let app = spawn_app().await;
    let drop = seed_drop_line(&app, &["40", "41"], 1, 2, (1000, None)).await;
    let token = admitted(&app, &drop, "fay").await["admission"].as_str().unwrap().to_owned();
    let line = LineKeys::of_drop(app.store.keyspace().prefix(), &drop);
    let exists = async |key: &str| -> bool { app.redis.clone().exists(key).await.unwrap() };
    for size in ["40", "41"] {
        let sale = format!("{drop}.{size}");
        assert_eq!(buy_with(&app, &sale, "fay", Some(&token)).await.status(), 201, "{size}");
        app.wait_for_drain(&sale).await; // sold out: retirable once drained
    }
    let retire = async |size: &str| {
        let url = app.url(&format!("/admin/sales/{drop}.{size}"));
        let response = app.client.delete(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
        assert_eq!(response.status(), 200, "retire {size}: {}", response.text().await.unwrap());
    };
    retire("40").await;
    assert!(exists(&line.meta).await && exists(&line.queue.late).await, "the line lives on with the other size");
    retire("41").await;
    for key in [&line.meta, &line.queue.late, &line.queue.bought, &line.queue.admits, &line.queue.state] {
        assert!(!exists(key).await, "{key} outlived the drop's last size");
    }
}

/// Joins racing the retirement of a drop's last size leave none of the line's keys behind: the
/// retirement drained the line, then deleted its meta, and a join between the two (the line still
/// there) wrote a late place and the line's state again, keys without an expiry that nothing
/// would ever delete. Joiners storm the line until the retirement answers.
#[tokio::test]
async fn joins_racing_the_last_retirement_leave_no_line_behind() {
    let app = spawn_app().await;
    let drop = seed_drop_line(&app, &["40"], 1, 1, (1000, None)).await;
    let token = admitted(&app, &drop, "gus").await["admission"].as_str().unwrap().to_owned();
    let sale = format!("{drop}.40");
    assert_eq!(buy_with(&app, &sale, "gus", Some(&token)).await.status(), 201);
    app.wait_for_drain(&sale).await;
    let retiring = async {
        let url = app.url(&format!("/admin/sales/{sale}"));
        let response = app.client.delete(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
        assert_eq!(response.status(), 200, "retire: {}", response.text().await.unwrap());
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let joiner = async |n: usize| {
        let mut statuses = Vec::new();
        for i in 0.. {
            if done.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            statuses.push(join(&app, &drop, &format!("j{n}-{i}"), None).await.status().as_u16());
        }
        statuses
    };
    let (_, a, b, c, d) = tokio::join!(
        async {
            retiring.await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        },
        joiner(1),
        joiner(2),
        joiner(3),
        joiner(4)
    );
    let statuses: Vec<u16> = [a, b, c, d].concat();
    assert!(statuses.contains(&200), "no join landed before the retirement: {statuses:?}");
    assert!(statuses.iter().all(|s| *s < 500), "{statuses:?}");
    let line = LineKeys::of_drop(app.store.keyspace().prefix(), &drop);
    let queue = &line.queue;
    for key in [&line.meta, &queue.prequeue, &queue.late, &queue.bought, &queue.admits, &queue.state] {
        let exists: bool = app.redis.clone().exists(key).await.unwrap();
        assert!(!exists, "{key} outlived the drop's last size");
    }
}
