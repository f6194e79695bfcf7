//! The draw's run (`seckill::draw::run`): an operator's run (`POST /admin/drops/{drop}/draw`), its
//! published record (`GET /drops/{drop}/draw`) that `seckill::draw::verify` checks, the winners'
//! reservations, the buyers' results, a re-run, a crash mid-award, two instances at once and the
//! automatic run once the entries close.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use seckill::domain::DropId;
use seckill::draw::run::{self, DRAIN_WAIT};
use seckill::draw::{Outcome, record, verify};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::common::drops::new_drop_id;
use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, spawn_app, spawn_app_with, spawn_instance_of};

pub(crate) const SIZES: [&str; 3] = ["41", "42", "43"];

/// RFC 3339 of now plus `seconds`.
pub(crate) fn at(seconds: i64) -> String {
    (OffsetDateTime::now_utc() + time::Duration::seconds(seconds)).format(&Rfc3339).unwrap()
}

/// A fresh drop in draw mode: sizes 41, 42, 43 with `stock` units each, 2 per buyer, a payment
/// window, entries open until `closes_in` seconds from now, 10 waitlist places.
pub(crate) async fn draw_drop(app: &TestApp, stock: [u32; 3], closes_in: i64) -> String {
    draw_drop_with_window(app, stock, closes_in, "10m").await
}

/// [`draw_drop`] with the payment window `window`.
pub(crate) async fn draw_drop_with_window(app: &TestApp, stock: [u32; 3], closes_in: i64, window: &str) -> String {
    let drop = new_drop_id();
    let sizes: serde_json::Map<String, Value> =
        SIZES.iter().zip(stock).map(|(size, units)| (size.to_string(), json!({"stock": units}))).collect();
    let draw = json!({"opens_at": at(-60), "closes_at": at(closes_in), "waitlist": 10});
    let body =
        json!({"sizes": sizes, "per_buyer": 2, "payment_window": window, "challenge": {"cost": 0}, "draw": draw});
    let url = app.url(&format!("/admin/drops/{drop}"));
    let response = app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    drop
}

/// `n` buyers `u000`… enter through the API, with varied preferences and quantities.
async fn enter_all(app: &TestApp, drop: &str, n: usize) {
    let body = |i: usize| {
        let sizes: Vec<&str> = (0..1 + i % 3).map(|k| SIZES[(i + k) % 3]).collect();
        json!({"sizes": sizes, "quantity": 1 + i.is_multiple_of(4) as u32, "user_id": format!("u{i:03}")})
    };
    enter_each(app, drop, (0..n).map(body).collect()).await;
}

/// Each entry of `bodies` through the API, 32 at a time: every one accepted.
pub(crate) async fn enter_each(app: &TestApp, drop: &str, bodies: Vec<Value>) {
    let statuses: Vec<u16> = futures::stream::iter(bodies)
        .map(|body| async move {
            let response = app.client.post(app.url(&format!("/drops/{drop}/entries"))).json(&body).send().await;
            response.unwrap().status().as_u16()
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
}

pub(crate) async fn run_now(app: &TestApp, drop: &str) -> reqwest::Response {
    app.client.post(app.url(&format!("/admin/drops/{drop}/draw"))).bearer_auth(ADMIN_TOKEN).send().await.unwrap()
}

/// The results in Postgres: user -> (outcome, size, quantity, position, order id).
pub(crate) type Result = (String, Option<String>, i32, Option<i32>, Option<Uuid>);
pub(crate) type Results = BTreeMap<String, Result>;

pub(crate) async fn results(app: &TestApp, drop: &str) -> Results {
    let rows: Vec<(String, Result)> =
        sqlx::query_as::<_, (String, String, Option<String>, i32, Option<i32>, Option<Uuid>)>(
            "select user_id, outcome, size, quantity, position, order_id from draw_results where drop_id = $1",
        )
        .bind(drop)
        .fetch_all(&app.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(u, o, s, q, p, id)| (u, (o, s, q, p, id)))
        .collect();
    rows.into_iter().collect()
}

/// The published record, read and verified.
async fn verified_record(app: &TestApp, drop: &str) -> record::Record {
    let response = app.client.get(app.url(&format!("/drops/{drop}/draw"))).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let body = response.bytes().await.unwrap();
    let record = record::read(&body[..]).unwrap();
    verify(&record).unwrap_or_else(|err| panic!("the record does not verify: {err:?}"));
    record
}

/// Waits until every winner's reservation is in Postgres; then checks each size's invariants.
async fn assert_reservations(app: &TestApp, drop: &str, results: &Results) {
    let winners: BTreeSet<Uuid> = results.values().filter_map(|r| r.4).collect();
    for size in SIZES {
        app.assert_invariants(&format!("{drop}.{size}"), &BTreeSet::new()).await;
    }
    let orders: Vec<(Uuid, String, String, i32, String)> = sqlx::query_as(
        "select order_id, sale_id, user_id, quantity, status from orders where left(sale_id, length($1) + 1) = $1 || '.'",
    )
    .bind(drop)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(orders.len(), winners.len(), "one reservation per winner");
    for (order_id, sale, user, quantity, status) in orders {
        let (outcome, size, won, _, id) = &results[&user];
        assert_eq!((outcome.as_str(), id.as_ref(), status.as_str()), ("won", Some(&order_id), "reserved"));
        assert_eq!((sale, quantity), (format!("{drop}.{}", size.as_ref().unwrap()), *won));
        assert!(quantity <= 2, "over the limit");
    }
}

#[tokio::test]
async fn a_draw_run_early_awards_each_winner_once_and_publishes_a_record_that_verifies() {
    let app = spawn_app().await;
    let drop = draw_drop(&app, [20, 15, 10], 3600).await;
    enter_all(&app, &drop, 300).await;
    let buy = json!({"sale_id": format!("{drop}.41"), "user_id": "u001"});
    assert_error(app.client.post(app.url("/buy")).json(&buy).send().await.unwrap(), 409, "draw_only").await;
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"seckill_purchases_total{outcome="draw_only"} 1"#), "counted as draw_only");
    let early = app.client.get(app.url(&format!("/drops/{drop}/draw"))).send().await.unwrap();
    assert_error(early, 409, "draw_not_revealed").await;

    // A crash mid-award: the run stops after one award call (one size's winners).
    let id = DropId::parse(&drop).unwrap();
    let redis = app.store.keyspace();
    let (_, partial) = run::run_until(redis, &app.pool, &id, DRAIN_WAIT, Some(1)).await.unwrap();
    assert!(!partial.done && partial.calls == 1 && partial.made > 0, "{partial:?}");
    println!("award: the slowest of {} call(s) took {:?}", partial.calls, partial.slowest);
    let before = results(&app, &drop).await;
    assert_eq!(before.len(), 300);
    let entered = app.client.post(app.url(&format!("/drops/{drop}/entries")));
    let late = entered.json(&json!({"sizes": ["41"], "user_id": "late"})).send().await.unwrap();
    assert_error(late, 409, "entries_closed").await;

    let response = run_now(&app, &drop).await;
    assert_eq!(response.status(), 200);
    let summary: Value = response.json().await.unwrap();
    assert_eq!((&summary["state"], &summary["entries"]), (&json!("drawn"), &json!(300)), "{summary}");
    let after = results(&app, &drop).await;
    assert_eq!(before, after, "the results and their order ids are the ones of the first run");
    let won = after.values().filter(|r| r.0 == "won").count();
    let units: i32 = after.values().filter(|r| r.0 == "won").map(|r| r.2).sum();
    assert_eq!((summary["won"].as_u64(), summary["units_awarded"].as_u64()), (Some(won as u64), Some(units as u64)));
    assert!((40..=45).contains(&units), "nearly every unit goes out: {units}");
    assert_eq!(after.values().filter(|r| r.0 == "waitlisted").count(), 10);

    let record = verified_record(&app, &drop).await;
    assert_eq!(record.entries.len(), 300);
    let announced: BTreeMap<&str, &Outcome> = record.results.iter().map(|(e, o)| (e.as_str(), o)).collect();
    for (user, (outcome, size, quantity, position, _)) in &after {
        let entrant = seckill::draw::entrant(&id, &seckill::domain::UserId::stored(user).unwrap());
        let expected = match outcome.as_str() {
            "won" => Outcome::Won { size: size.clone().unwrap(), quantity: *quantity as u32 },
            "waitlisted" => Outcome::Waitlisted { position: position.unwrap() as u32 },
            _ => Outcome::Lost,
        };
        assert_eq!(announced[entrant.as_str()], &expected, "{user}");
    }
    assert_reservations(&app, &drop, &after).await;

    // Each buyer's result.
    for (user, (outcome, size, _, position, order_id)) in after.iter().take(40) {
        let entry = app.get_as(&format!("/drops/{drop}/entry"), user).await;
        assert_eq!(entry["state"], outcome.as_str(), "{entry}");
        match outcome.as_str() {
            "won" => {
                assert_eq!((&entry["size"], &entry["order_id"]), (&json!(size), &json!(order_id)), "{entry}");
                assert!(entry["pay_by"].is_string(), "{entry}");
            }
            "waitlisted" => assert_eq!(entry["position"], json!(position), "{entry}"),
            _ => {}
        }
    }

    // A re-run changes nothing.
    let again: Value = run_now(&app, &drop).await.json().await.unwrap();
    assert_eq!(again, summary);
    let audit = app.client.get(app.url(&format!("/admin/drops/{drop}/audit"))).bearer_auth(ADMIN_TOKEN).send();
    let audit: Value = audit.await.unwrap().json().await.unwrap();
    let draws: Vec<&Value> = audit["entries"].as_array().unwrap().iter().filter(|e| e["action"] == "draw").collect();
    assert_eq!(draws.len(), 2, "one audit entry per operator's run: {audit}");
    assert_eq!(draws[0]["effect"]["won"], summary["won"]);
    assert_eq!(results(&app, &drop).await, after);
    assert_reservations(&app, &drop, &after).await;
    let view: Value = app.client.get(app.url(&format!("/drops/{drop}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(view["draw"]["seed"], json!(record.seed), "the seed revealed: {view}");
    let buy = json!({"sale_id": format!("{drop}.42"), "user_id": "u002"});
    assert_error(app.client.post(app.url("/buy")).json(&buy).send().await.unwrap(), 409, "draw_only").await;
}

#[tokio::test]
async fn two_instances_asked_at_once_give_one_set_of_results() {
    let app = spawn_app().await;
    let other = spawn_instance_of(&app).await;
    let drop = draw_drop(&app, [3, 3, 3], 3600).await;
    enter_all(&app, &drop, 40).await;
    let (a, b) = tokio::join!(run_now(&app, &drop), run_now(&other, &drop));
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let (a, b): (Value, Value) = (a.json().await.unwrap(), b.json().await.unwrap());
    assert_eq!(a, b);
    let results = results(&app, &drop).await;
    assert_eq!(results.len(), 40);
    verified_record(&other, &drop).await;
    assert_reservations(&app, &drop, &results).await;
}

#[tokio::test]
async fn a_draw_runs_by_itself_once_its_entries_close() {
    let app = spawn_app().await;
    // Entries close 10 s after the seed: the seed and the 12 entries must land before, on a
    // loaded host too.
    let drop = draw_drop(&app, [2, 2, 2], 10).await;
    enter_all(&app, &drop, 12).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let state: Option<String> = sqlx::query_scalar("select state from draws where drop_id = $1")
            .bind(&drop)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        if state.as_deref() == Some("drawn") {
            break;
        }
        assert!(tokio::time::Instant::now() < until, "not drawn: {state:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let results = results(&app, &drop).await;
    assert_eq!(results.len(), 12);
    verified_record(&app, &drop).await;
    assert_reservations(&app, &drop, &results).await;
    let unknown = run_now(&app, &new_drop_id()).await;
    assert_error(unknown, 404, "unknown_drop").await;
}

#[tokio::test]
/// The award is cut into calls of at most `run::CHUNK` winners, so no call holds Redis long; how
/// long is a benchmark's to say (`cargo xtask load k6-draw` checks the slowest call on a release
/// build), not a debug test's on a loaded host: this prints the figure and asserts the cut.
async fn winners_are_awarded_in_chunks_of_at_most_250() {
    let app = spawn_app().await;
    let drop = draw_drop(&app, [520, 0, 0], 3600).await;
    let bodies = (0..520).map(|i| json!({"sizes": ["41"], "user_id": format!("c{i:03}")})).collect();
    enter_each(&app, &drop, bodies).await;
    let id = DropId::parse(&drop).unwrap();
    let (summary, awarded) = run::run_until(app.store.keyspace(), &app.pool, &id, DRAIN_WAIT, None).await.unwrap();
    println!(
        "award: {} winners in {} calls, the slowest {:?} (round trip)",
        awarded.made, awarded.calls, awarded.slowest
    );
    assert_eq!(
        (summary.won, awarded.made, awarded.calls, awarded.done),
        (520, 520, 520usize.div_ceil(run::CHUNK), true)
    );
    let results = results(&app, &drop).await;
    verified_record(&app, &drop).await;
    assert_reservations(&app, &drop, &results).await;
}

#[tokio::test]
async fn a_draw_waits_for_its_entries_in_postgres_and_is_refused_where_there_is_none() {
    // No worker: the accepted entries never reach Postgres.
    let app = spawn_app_with(|_| {}, false).await;
    let drop = draw_drop(&app, [2, 2, 2], 3600).await;
    enter_all(&app, &drop, 3).await;
    let id = DropId::parse(&drop).unwrap();
    let outcome = run::run(app.store.keyspace(), &app.pool, &id, Duration::from_millis(300)).await;
    assert!(matches!(outcome, Err(run::RunError::EntriesQueued { stored: 0, accepted: 3 })), "{outcome:?}");
    let late = app.client.post(app.url(&format!("/drops/{drop}/entries")));
    let late = late.json(&json!({"sizes": ["41"], "user_id": "late"})).send().await.unwrap();
    assert_error(late, 409, "entries_closed").await;
    assert!(results(&app, &drop).await.is_empty(), "nothing drawn");

    let plain = crate::common::drops::seed_drop_sizes(&app, &["41"], 5, 1).await;
    assert_error(run_now(&app, &plain).await, 409, "not_a_draw").await;
    let record = app.client.get(app.url(&format!("/drops/{plain}/draw"))).send().await.unwrap();
    assert_error(record, 409, "not_a_draw").await;
    let audit = app.client.get(app.url(&format!("/admin/drops/{drop}/audit"))).bearer_auth(ADMIN_TOKEN).send();
    let audit: Value = audit.await.unwrap().json().await.unwrap();
    assert!(audit["entries"].as_array().unwrap().iter().all(|e| e["action"] != "draw"), "{audit}");
}

#[tokio::test]
async fn a_winner_refused_by_a_paused_size_is_a_409_and_the_results_stand_until_a_run_after_the_resume() {
    let app = spawn_app().await;
    let drop = draw_drop(&app, [5, 5, 5], 600).await;
    enter_all(&app, &drop, 6).await;
    let switch = |action: &'static str| {
        let url = app.url(&format!("/admin/drops/{drop}/{action}"));
        app.client.post(url).bearer_auth(ADMIN_TOKEN).send()
    };
    assert_eq!(switch("pause").await.unwrap().status(), 200);

    assert_error(run_now(&app, &drop).await, 409, "draw_award_refused").await;
    let first = results(&app, &drop).await;
    assert_eq!(first.len(), 6, "every entrant has a result once the allocation is kept");

    assert_eq!(switch("resume").await.unwrap().status(), 200);
    let response = run_now(&app, &drop).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    assert_eq!(results(&app, &drop).await, first, "a run after the refusal awards the same results");
    assert_reservations(&app, &drop, &first).await;
}

#[tokio::test]
async fn results_over_many_statements_are_written_once_in_one_transaction() {
    use seckill::draw::run::store;
    let app = spawn_app().await;
    sqlx::query("insert into webhook_endpoints (url, disabled_at) values ('http://127.0.0.1:9/hook', now())")
        .execute(&app.pool)
        .await
        .unwrap();
    let id = DropId::parse(&new_drop_id()).unwrap();
    // 25,000 results: three statements; one in five won, the rest lost.
    let results: Vec<store::Result> = (0..25_000)
        .map(|i| {
            let user = seckill::domain::UserId::parse(&format!("r{i:05}")).unwrap();
            let won = i % 5 == 0;
            store::Result {
                entrant: seckill::draw::entrant(&id, &user),
                user,
                outcome: if won { Outcome::Won { size: "41".into(), quantity: 1 } } else { Outcome::Lost },
                quantity: 1,
                order_id: won.then(Uuid::now_v7),
            }
        })
        .collect();
    assert_eq!(store::insert(&app.pool, &id, &results).await.unwrap(), 25_000, "the first insert writes all");
    assert_eq!(store::insert(&app.pool, &id, &results).await.unwrap(), 0, "the second writes none");
    let (rows, lost_events): (i64, i64) = sqlx::query_as(
        "select (select count(*) from draw_results where drop_id = $1),
                (select count(*) from webhook_events where type = 'draw.lost' and sale_id = $1)",
    )
    .bind(id.as_str())
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((rows, lost_events), (25_000, 20_000), "every result and every loser's event, once");
    assert_eq!(store::results(&app.pool, &id).await.unwrap(), {
        let mut sorted = results.clone();
        sorted.sort_by(|a, b| a.user.as_str().cmp(b.user.as_str()));
        sorted
    });
}

/// A drop that ended before its draw ran (an operator's end, or an end at the close) still has
/// its winners awarded and its seed revealed: an award skips the sizes' hours. Refused as
/// `ended`, the run had stalled for good, its results told to the winners without reservations.
#[tokio::test]
async fn a_drop_that_ended_before_its_draw_still_awards_its_winners_and_reveals_the_seed() {
    let app = spawn_app().await;
    let drop = draw_drop(&app, [5, 5, 5], 600).await;
    enter_all(&app, &drop, 6).await;
    let url = app.url(&format!("/admin/drops/{drop}/end"));
    assert_eq!(app.client.post(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().status(), 200);

    let response = run_now(&app, &drop).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let results = results(&app, &drop).await;
    assert_eq!(results.len(), 6);
    assert_reservations(&app, &drop, &results).await;
    verified_record(&app, &drop).await;
}

/// A drop in draw mode keeps the draw's terms (its sizes' stock, the limit, the waitlist's places):
/// a stock change, of the drop or of one size, and a re-seed that changes a term are refused (409
/// `draw_stock_fixed`) before the draw and after it, so an operator cannot steer the allocation
/// and the published record keeps verifying.
#[tokio::test]
async fn a_draws_terms_cannot_change_before_or_after_it_runs() {
    let app = spawn_app().await;
    let drop = draw_drop(&app, [2, 2, 2], 600).await;
    enter_all(&app, &drop, 8).await;
    let change = async |app: &TestApp| {
        let drop_stock = app.url(&format!("/admin/drops/{drop}/stock"));
        let whole = app.client.post(drop_stock).bearer_auth(ADMIN_TOKEN).json(&json!({"add": {"42": 1}}));
        let size_stock = app.url(&format!("/admin/sales/{drop}.42/stock"));
        let one = app.client.post(size_stock).bearer_auth(ADMIN_TOKEN).json(&json!({"add": -1}));
        (whole.send().await.unwrap(), one.send().await.unwrap())
    };
    // A re-seed may keep the terms (the window, say, moves), and may change none of them: a
    // size's stock, a new size, the limit or the waitlist's places.
    let reseed = async |app: &TestApp, sizes: Value, per_buyer: u32, waitlist: u32| {
        let draw = json!({"opens_at": at(-60), "closes_at": at(600), "waitlist": waitlist});
        let body = json!({"sizes": sizes, "per_buyer": per_buyer, "payment_window": "10m", "challenge": {"cost": 0}, "draw": draw});
        let url = app.url(&format!("/admin/drops/{drop}"));
        app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap()
    };
    let same = json!({"41": {"stock": 2}, "42": {"stock": 2}, "43": {"stock": 2}});
    let refused_terms = async |app: &TestApp| {
        let more = json!({"41": {"stock": 2}, "42": {"stock": 3}, "43": {"stock": 2}});
        let new_size = json!({"41": {"stock": 2}, "42": {"stock": 2}, "43": {"stock": 2}, "44": {"stock": 1}});
        for (sizes, per_buyer, waitlist) in
            [(more, 2, 10), (new_size, 2, 10), (same.clone(), 1, 10), (same.clone(), 2, 11)]
        {
            assert_error(reseed(app, sizes.clone(), per_buyer, waitlist).await, 409, "draw_stock_fixed").await;
        }
    };
    let (whole, one) = change(&app).await;
    assert_error(whole, 409, "draw_stock_fixed").await;
    assert_error(one, 409, "draw_stock_fixed").await;
    refused_terms(&app).await;
    assert_eq!(reseed(&app, same.clone(), 2, 10).await.status(), 200, "the same terms");

    assert_eq!(run_now(&app, &drop).await.status(), 200);
    let (whole, one) = change(&app).await;
    assert_error(whole, 409, "draw_stock_fixed").await;
    assert_error(one, 409, "draw_stock_fixed").await;
    refused_terms(&app).await;
    verified_record(&app, &drop).await;
}

/// A drawn draw's record is public and streamed a page at a time for as long as its reader takes
/// a chunk every write deadline: with no cap, each of one address's connections could hold one
/// open (a page in memory each, and Postgres queried for the next). An instance streams at most
/// `readers::MAX_CONCURRENT` at once (the unit tests of `seckill::draw::run::readers`) and one to
/// each client address: its second is refused 429 `too_many_draw_records` with `Retry-After`, and
/// its reader gone frees its place.
#[tokio::test]
async fn a_client_streams_one_draw_record_at_a_time() {
    // A reader that stops reading is not cut off by the write deadline while the test runs.
    let app = spawn_app_with(|c| c.edge.response_write_timeout = Duration::from_secs(600), true).await;
    let drop = draw_drop(&app, [3, 0, 0], 3600).await;
    let bodies = (0..3).map(|i| json!({"sizes": ["41"], "user_id": format!("c{i}")})).collect();
    enter_each(&app, &drop, bodies).await;
    assert_eq!(run_now(&app, &drop).await.status(), 200);
    // A record of some 10 MB, far more than the sockets and the server's buffers hold: a reader
    // that takes nothing keeps its stream waiting (rows put straight in Postgres, after the run).
    sqlx::query(
        "insert into draw_entries (drop_id, user_id, sizes, quantity, entered_at) \
         select $1, 'bulk-' || lpad(g::text, 6, '0'), array['41'], 1, now() from generate_series(1, 100000) g",
    )
    .bind(&drop)
    .execute(&app.pool)
    .await
    .unwrap();
    let url = app.url(&format!("/drops/{drop}/draw"));
    let held = app.client.get(&url).send().await.unwrap();
    assert_eq!(held.status(), 200); // its body never read
    let refused = app.client.get(&url).send().await.unwrap();
    assert_eq!(refused.headers()["retry-after"], "5");
    assert_error(refused, 429, "too_many_draw_records").await;

    std::mem::drop(held); // the reader gone: its stream ends at the next write
    let until = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let response = app.client.get(&url).send().await.unwrap();
        if response.status() == 200 {
            break;
        }
        assert!(std::time::Instant::now() < until, "the place was not freed");
        assert_error(response, 429, "too_many_draw_records").await;
    }
}
