//! A drop in draw mode, its entries side: seeded with an entry window (`draw` of `PUT
//! /admin/drops/{drop}`), entered once per buyer (`POST /drops/{drop}/entries`), read back (`GET
//! /drops/{drop}/entry`), never bought (`draw_only`), and every accepted entry in Postgres once.

use std::time::Duration;

use futures::StreamExt;
use redis::AsyncCommands;
use seckill::domain::DropId;
use seckill::redis::keys::DropKeys;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::common::drops::new_drop_id;
use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, lock_waiters, spawn_app, spawn_app_with};

/// RFC 3339 of now plus `seconds`.
pub(crate) fn at(seconds: i64) -> String {
    (OffsetDateTime::now_utc() + time::Duration::seconds(seconds)).format(&Rfc3339).unwrap()
}

/// `PUT /admin/drops/{drop}` of sizes 41, 42 and 43 (5 each, 2 per buyer, a payment window) with
/// `draw`; the answer.
pub(crate) async fn put_draw(app: &TestApp, drop: &str, draw: Value) -> reqwest::Response {
    let sizes = json!({"41": {"stock": 5}, "42": {"stock": 5}, "43": {"stock": 5}});
    let body = json!({"sizes": sizes, "per_buyer": 2, "payment_window": "10m", "challenge": {"cost": 0}, "draw": draw});
    let url = app.url(&format!("/admin/drops/{drop}"));
    app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap()
}

/// A fresh drop whose entries opened a minute ago and close in an hour.
pub(crate) async fn open_draw(app: &TestApp) -> String {
    let drop = new_drop_id();
    let response = put_draw(app, &drop, json!({"opens_at": at(-60), "closes_at": at(3600)})).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    drop
}

/// The draw's secret seed and its commitment, as Postgres keeps them.
async fn draw_row(app: &TestApp, drop: &str) -> (String, String) {
    sqlx::query_as("select seed, commitment from draws where drop_id = $1")
        .bind(drop)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

pub(crate) async fn enter(app: &TestApp, drop: &str, body: Value) -> reqwest::Response {
    app.client.post(app.url(&format!("/drops/{drop}/entries"))).json(&body).send().await.unwrap()
}

pub(crate) fn keys(app: &TestApp, drop: &str) -> DropKeys {
    DropKeys::new(&app.config.key_prefix, &DropId::parse(drop).unwrap())
}

/// Entries Redis holds: the hash's and the stream's lengths.
pub(crate) async fn in_redis(app: &TestApp, drop: &str) -> (i64, i64) {
    let keys = keys(app, drop);
    let hash: i64 = app.redis.clone().hlen(&keys.entries).await.unwrap();
    let stream: i64 = app.redis.clone().xlen(&keys.entry_stream).await.unwrap();
    (hash, stream)
}

pub(crate) async fn stored(app: &TestApp, drop: &str) -> i64 {
    sqlx::query_scalar("select count(*) from draw_entries where drop_id = $1")
        .bind(drop)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// Waits until Postgres holds `n` entries of the drop (the worker copies them).
pub(crate) async fn wait_stored(app: &TestApp, drop: &str, n: i64) {
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    while stored(app, drop).await != n {
        assert!(tokio::time::Instant::now() < until, "Postgres holds {} entries, not {n}", stored(app, drop).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn public(app: &TestApp, drop: &str) -> Value {
    app.client.get(app.url(&format!("/drops/{drop}"))).send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn a_buyer_enters_once_reads_the_entry_back_and_it_reaches_postgres() {
    let app = spawn_app().await;
    let drop = open_draw(&app).await;
    let response = enter(&app, &drop, json!({"sizes": ["42", "41"], "quantity": 2, "user_id": "ann"})).await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    assert_eq!((&body["drop_id"], &body["sizes"], &body["quantity"]), (&json!(drop), &json!(["42", "41"]), &json!(2)));
    assert_eq!(body["state"], "entered");
    let entered_at = body["entered_at"].as_str().unwrap().to_owned();

    let url = app.url(&format!("/drops/{drop}/entry"));
    let read: Value = app.client.get(&url).query(&[("user_id", "ann")]).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        (&read["sizes"], &read["state"], &read["entered_at"]),
        (&body["sizes"], &body["state"], &json!(entered_at))
    );
    assert_error(app.client.get(&url).query(&[("user_id", "bob")]).send().await.unwrap(), 404, "no_entry").await;

    let again = enter(&app, &drop, json!({"sizes": ["43"], "user_id": "ann"})).await;
    assert_eq!(again.status(), 409);
    let refused: Value = again.json().await.unwrap();
    assert_eq!(refused["error"], "already_entered");
    assert_eq!(
        (&refused["entry"]["sizes"], &refused["entry"]["entered_at"]),
        (&json!(["42", "41"]), &json!(entered_at))
    );

    let view = public(&app, &drop).await;
    assert_eq!((&view["draw"]["state"], &view["draw"]["entries"]), (&json!("open"), &json!(1)), "{view}");
    let admin: Value = app
        .client
        .get(app.url(&format!("/admin/drops/{drop}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(admin["draw"]["commitment"], view["draw"]["commitment"]);
    // The commitment is the SHA-256 of the secret seed Postgres keeps (never shown before the draw).
    let (seed, commitment) = draw_row(&app, &drop).await;
    assert_eq!(commitment, seckill::shop::seed_commitment(&seed));
    assert_eq!(view["draw"]["commitment"], commitment);
    assert!(!view.to_string().contains(&seed), "the seed stays secret");
    wait_stored(&app, &drop, 1).await;

    // Entries closed (Redis's draw meta says so): ann, sending her entry again (its answer lost,
    // say), still learns it was kept; bob is refused.
    let _: () =
        redis::AsyncCommands::hset(&mut app.redis.clone(), &keys(&app, &drop).draw, "closes_at_ms", 1).await.unwrap();
    let again = enter(&app, &drop, json!({"sizes": ["42", "41"], "user_id": "ann"})).await;
    assert_eq!(again.status(), 409);
    let again: Value = again.json().await.unwrap();
    assert_eq!((&again["error"], &again["entry"]["entered_at"]), (&json!("already_entered"), &json!(entered_at)));
    assert_error(enter(&app, &drop, json!({"sizes": ["41"], "user_id": "bob"})).await, 409, "entries_closed").await;

    // A re-seed keeps the seed and its commitment.
    let response = put_draw(&app, &drop, json!({"opens_at": at(-60), "closes_at": at(7200)})).await;
    assert_eq!(response.status(), 200);
    let kept: String =
        sqlx::query_scalar("select seed from draws where drop_id = $1").bind(&drop).fetch_one(&app.pool).await.unwrap();
    assert_eq!(kept, seed);
    // A drop once in draw mode stays in it.
    let sizes = json!({"41": {"stock": 5}, "42": {"stock": 5}, "43": {"stock": 5}});
    let url = app.url(&format!("/admin/drops/{drop}"));
    let plain = app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&json!({"sizes": sizes})).send().await.unwrap();
    assert_error(plain, 400, "invalid_request").await;
}

#[tokio::test]
async fn five_hundred_parallel_entries_of_one_buyer_make_one_entry() {
    let app = spawn_app().await;
    let drop = open_draw(&app).await;
    let statuses: Vec<(u16, String)> = futures::stream::iter(0..500)
        .map(|_| async {
            let response = enter(&app, &drop, json!({"sizes": ["41"], "user_id": "ann"})).await;
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            (status, body["error"].as_str().unwrap_or_default().to_owned())
        })
        .buffer_unordered(100)
        .collect()
        .await;
    assert_eq!(statuses.iter().filter(|(s, _)| *s == 201).count(), 1);
    assert_eq!(statuses.iter().filter(|(s, e)| *s == 409 && e == "already_entered").count(), 499);
    assert_eq!(in_redis(&app, &drop).await.0, 1);
    wait_stored(&app, &drop, 1).await;
}

#[tokio::test]
async fn entries_are_refused_before_the_window_and_after_it() {
    let app = spawn_app().await;
    let upcoming = new_drop_id();
    assert_eq!(put_draw(&app, &upcoming, json!({"opens_at": at(3600), "closes_at": at(7200)})).await.status(), 200);
    let response = enter(&app, &upcoming, json!({"sizes": ["41"], "user_id": "ann"})).await;
    assert_error(response, 409, "entries_not_open").await;
    assert_eq!(public(&app, &upcoming).await["draw"]["state"], "upcoming");

    let over = new_drop_id();
    assert_eq!(put_draw(&app, &over, json!({"opens_at": at(-7200), "closes_at": at(-3600)})).await.status(), 200);
    assert_error(enter(&app, &over, json!({"sizes": ["41"], "user_id": "ann"})).await, 409, "entries_closed").await;
    assert_eq!(public(&app, &over).await["draw"]["state"], "closed");
    assert_eq!((in_redis(&app, &upcoming).await, in_redis(&app, &over).await), ((0, 0), (0, 0)));
}

#[tokio::test]
async fn bad_entries_are_refused_and_store_nothing() {
    let app = spawn_app().await;
    let drop = open_draw(&app).await;
    let seven: Vec<String> = (0..7).map(|i| format!("s{i}")).collect();
    let bad = [
        json!({"sizes": ["44"], "user_id": "ann"}),
        json!({"sizes": ["41", "41"], "user_id": "ann"}),
        json!({"sizes": ["41"], "quantity": 0, "user_id": "ann"}),
        json!({"sizes": ["41"], "quantity": 3, "user_id": "ann"}),
        json!({"sizes": seven, "user_id": "ann"}),
        json!({"sizes": [], "user_id": "ann"}),
        json!({"sizes": ["4 1"], "user_id": "ann"}),
        json!({"sizes": ["x".repeat(3000)], "user_id": "ann"}),
        json!({"sizes": ["41"], "user_id": "ann", "extra": 1}),
        json!({"sizes": ["41"]}),
        json!(["41"]),
    ];
    for body in bad {
        let response = enter(&app, &drop, body.clone()).await;
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap();
        assert_eq!((status, answer["error"].as_str()), (400, Some("invalid_request")), "{body}: {answer}");
    }
    let huge = json!({"sizes": ["41"], "user_id": "x".repeat(5000)});
    assert_error(enter(&app, &drop, huge).await, 413, "payload_too_large").await;
    assert_eq!(in_redis(&app, &drop).await, (0, 0), "nothing stored");
    assert_error(enter(&app, &new_drop_id(), json!({"sizes": ["41"], "user_id": "ann"})).await, 404, "unknown_drop")
        .await;
    let plain = crate::common::drops::seed_drop_sizes(&app, &["41"], 5, 1).await;
    assert_error(enter(&app, &plain, json!({"sizes": ["41"], "user_id": "ann"})).await, 409, "not_a_draw").await;
}

#[tokio::test]
async fn a_size_of_a_draw_is_never_bought() {
    let app = spawn_app().await;
    let drop = open_draw(&app).await;
    let body = json!({"sale_id": format!("{drop}.41"), "user_id": "ann"});
    assert_error(app.client.post(app.url("/buy")).json(&body).send().await.unwrap(), 409, "draw_only").await;
    let status = app.status(&format!("{drop}.41")).await;
    assert_eq!((status.stock_left, status.sold), (5, 0), "nothing sold");
}

#[tokio::test]
async fn a_draw_needs_a_payment_window_no_line_and_an_ordered_window() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let url = app.url(&format!("/admin/drops/{drop}"));
    let draw = json!({"opens_at": at(-60), "closes_at": at(3600)});
    let seed = |body: Value| app.client.put(&url).bearer_auth(ADMIN_TOKEN).json(&body).send();
    let sizes = json!({"41": {"stock": 5}});
    let no_window = seed(json!({"sizes": sizes, "draw": draw})).await.unwrap();
    let answer: Value = no_window.json().await.unwrap();
    assert_eq!(answer["error"], "invalid_request");
    assert!(answer["message"].as_str().unwrap().contains("payment_window"), "{answer}");
    let line = json!({"opens_at": at(-60), "rate": 10});
    let with_line =
        seed(json!({"sizes": sizes, "payment_window": "5m", "starts_at": at(60), "waiting_room": line, "draw": draw}));
    let answer: Value = with_line.await.unwrap().json().await.unwrap();
    assert_eq!(answer["error"], "invalid_request");
    assert!(answer["message"].as_str().unwrap().contains("waiting_room"), "{answer}");
    let backwards = json!({"opens_at": at(3600), "closes_at": at(-60)});
    let response = seed(json!({"sizes": sizes, "payment_window": "5m", "draw": backwards})).await.unwrap();
    assert_error(response, 400, "invalid_request").await;
    let rows: i64 = sqlx::query_scalar("select count(*) from draws where drop_id = $1")
        .bind(&drop)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing seeded");
}

#[tokio::test]
async fn a_draw_that_asks_a_proof_of_work_takes_one_solution_per_entry() {
    let app = spawn_app_with(|c| c.challenge.challenge_iterations = 1, true).await;
    let drop = new_drop_id();
    let draw = json!({"opens_at": at(-60), "closes_at": at(3600)});
    let body = json!({"sizes": {"41": {"stock": 5}}, "payment_window": "10m", "challenge": {"cost": 2}, "draw": draw});
    let url = app.url(&format!("/admin/drops/{drop}"));
    assert_eq!(app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap().status(), 200);
    let entry = json!({"sizes": ["41"], "user_id": "ann"});
    assert_error(enter(&app, &drop, entry.clone()).await, 403, "challenge_required").await;

    let url = app.url(&format!("/drops/{drop}/challenge"));
    let response = app.client.get(url).query(&[("user_id", "ann")]).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let view: Value = response.json().await.unwrap();
    let solved =
        seckill::challenge::solve::solve(&serde_json::to_vec(&view).unwrap(), Duration::from_secs(60)).unwrap();
    let post = |body: &Value| {
        let url = app.url(&format!("/drops/{drop}/entries"));
        app.client.post(url).header("Seckill-Challenge", solved.header.clone()).json(body).send()
    };
    let bob = json!({"sizes": ["41"], "user_id": "bob"});
    assert_error(post(&bob).await.unwrap(), 403, "challenge_failed").await;
    assert_eq!(post(&entry).await.unwrap().status(), 201, "ann's own solution");
    // Ann's entry alone, once; the worker runs here, so its stream entry may already be copied to
    // Postgres and trimmed: the entry is waited for there.
    assert_eq!(in_redis(&app, &drop).await.0, 1);
    wait_stored(&app, &drop, 1).await;
}

/// An entry that fails on a damaged key after its nonce was spent (the entry stream of another
/// type) takes the nonce back: the same solution enters once the key is mended. It was refused
/// `challenge_replayed`, spent by the call that wrote nothing.
#[tokio::test]
async fn an_entry_failing_on_a_damaged_key_leaves_its_nonce_unspent() {
    let app = spawn_app().await;
    let drop = open_draw(&app).await;
    let id = DropId::parse(&drop).unwrap();
    let keys = keys(&app, &drop);
    let challenges = seckill::redis::keys::LineKeys::of_drop(&app.config.key_prefix, id.as_str()).challenges;
    let expires = (OffsetDateTime::now_utc().unix_timestamp() + 120) * 1000;
    let enter = || {
        let mut call = seckill::redis::lua::DRAW_ENTER.key(&keys.draw);
        call.key(&keys.entries).key(&keys.entry_stream).key(&challenges);
        call.arg("erin").arg("41").arg(1).arg("n-erin").arg(expires);
        call
    };
    let mut redis = app.redis.clone();
    let _: () = redis.set(&keys.entry_stream, "not a stream").await.unwrap();
    let failed: redis::RedisResult<redis::Value> = enter().invoke_async(&mut redis).await;
    assert!(failed.as_ref().is_err(), "{failed:?}");
    let spent: Option<f64> = redis.zscore(&challenges, "n-erin").await.unwrap();
    assert_eq!(spent, None, "the nonce is not spent");
    let kept: Option<String> = redis.hget(&keys.entries, "erin").await.unwrap();
    assert_eq!(kept, None, "nor the entry kept");
    let _: i64 = redis.del(&keys.entry_stream).await.unwrap();
    let entered: Vec<String> = enter().invoke_async(&mut redis).await.unwrap();
    assert_eq!(entered[0], "entered", "the same solution, mended: {entered:?}");
}

/// Two first seeds of a draw at once (an operator's retry while the first still runs) each draw a
/// seed; Postgres keeps the first's. Redis must publish that seed's commitment, whichever seed
/// ran its script last: a commitment the revealed seed does not hash to makes an honest draw
/// look rigged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_first_seeds_of_a_draw_at_once_publish_the_commitment_of_the_seed_kept() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    // Both seeds wait on the first size's row, which this transaction holds until both do.
    let mut blocker = app.pool.begin().await.unwrap();
    sqlx::query("insert into sales (sale_id, stock_initial) values ($1, 5)")
        .bind(format!("{drop}.41"))
        .execute(&mut *blocker)
        .await
        .unwrap();
    let window = json!({"opens_at": at(-60), "closes_at": at(3600)});
    let release = async {
        lock_waiters(&app.pool, 2).await;
        blocker.rollback().await.unwrap();
    };
    let (first, second, ()) =
        tokio::join!(put_draw(&app, &drop, window.clone()), put_draw(&app, &drop, window), release);
    assert_eq!((first.status().as_u16(), second.status().as_u16()), (200, 200));

    let (seed, commitment) = draw_row(&app, &drop).await;
    assert_eq!(commitment, seckill::shop::seed_commitment(&seed));
    let published: String =
        redis::AsyncCommands::hget(&mut app.redis.clone(), &keys(&app, &drop).draw, "commitment").await.unwrap();
    assert_eq!(published, commitment, "Redis publishes the commitment of the seed Postgres keeps");
    assert_eq!(public(&app, &drop).await["draw"]["commitment"], commitment);
}
