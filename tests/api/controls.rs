//! The sale-day controls: the kill switch (pause, resume, end), stock on the fly, and the audit
//! trail, on one instance and two.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::{Value, json};

use crate::helpers::{
    ADMIN_TOKEN, PrivateRedis, TestApp, assert_error, new_sale_id, quick_janitor, spawn_app, spawn_app_with,
    spawn_instance_of,
};

/// `POST /admin/sales/{sale}/{action}` with `body` (`None`: no body).
pub(crate) async fn control(app: &TestApp, sale: &str, action: &str, body: Option<Value>) -> reqwest::Response {
    let request = app.client.post(app.url(&format!("/admin/sales/{sale}/{action}"))).bearer_auth(ADMIN_TOKEN);
    let request = match body {
        Some(body) => request.json(&body),
        None => request,
    };
    request.send().await.unwrap()
}

async fn public_state(app: &TestApp, sale: &str) -> String {
    let body: Value = app.client.get(app.url(&format!("/sales/{sale}"))).send().await.unwrap().json().await.unwrap();
    body["state"].as_str().unwrap().to_owned()
}

async fn audit(app: &TestApp, sale: &str, query: &str) -> reqwest::Response {
    let url = app.url(&format!("/admin/sales/{sale}/audit{query}"));
    app.client.get(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap()
}

#[tokio::test]
async fn a_paused_sale_refuses_buys_with_nothing_bought_and_a_resume_reopens_it() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 5).await;
    assert_eq!(app.buy(&sale, "early").await.status(), 201);

    let paused = control(&app, &sale, "pause", Some(json!({"reason": "price typo"}))).await;
    assert_eq!(paused.status(), 200);
    let status: Value = paused.json().await.unwrap();
    assert_eq!((status["paused"].as_bool(), status["paused_reason"].as_str()), (Some(true), Some("price typo")));

    let refused = app.buy(&sale, "late").await;
    assert_eq!(refused.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned()), Some("5".into()));
    assert_error(refused, 403, "sale_paused").await;
    assert_error(app.buy(&sale, "early").await, 409, "already_purchased").await;
    assert_eq!(public_state(&app, &sale).await, "paused");
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"seckill_purchases_total{outcome="paused"} 1"#), "counted as paused");
    let status = app.status(&sale).await;
    assert_eq!((status.stock_left, status.sold, status.paused), (4, 1, true), "nothing bought: {status:?}");

    assert_eq!(control(&app, &sale, "resume", None).await.status(), 200);
    assert_eq!(app.buy(&sale, "late").await.status(), 201);
    assert_eq!(public_state(&app, &sale).await, "open");
    let status = app.status(&sale).await;
    assert_eq!((status.stock_left, status.sold, status.paused, status.paused_reason), (3, 2, false, None));
}

#[tokio::test]
async fn a_pause_and_a_resume_on_one_instance_are_obeyed_by_another_at_once() {
    let here = spawn_app().await;
    let there = spawn_instance_of(&here).await;
    let sale = new_sale_id();
    here.seed_stock(&sale, 5).await;
    assert_eq!(there.buy(&sale, "a").await.status(), 201);
    assert_eq!(control(&here, &sale, "pause", None).await.status(), 200);
    assert_error(there.buy(&sale, "b").await, 403, "sale_paused").await;
    assert_eq!(control(&here, &sale, "resume", None).await.status(), 200);
    assert_eq!(there.buy(&sale, "b").await.status(), 201, "no cache there holds the pause");
}

#[tokio::test]
async fn a_reason_is_bounded_and_an_unknown_sale_cannot_be_paused() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    assert_error(control(&app, &sale, "pause", None).await, 404, "unknown_sale").await;
    app.seed_stock(&sale, 1).await;
    let long = "x".repeat(201);
    assert_error(control(&app, &sale, "pause", Some(json!({"reason": long}))).await, 400, "invalid_request").await;
    assert_error(control(&app, &sale, "pause", Some(json!({"why": "no"}))).await, 400, "invalid_request").await;
    assert_eq!(control(&app, &sale, "resume", Some(Value::Null)).await.status(), 200, "null is no body");
    let anonymous = app.client.post(app.url(&format!("/admin/sales/{sale}/pause"))).send().await.unwrap();
    assert_error(anonymous, 401, "unauthorized").await;
    assert!(!app.status(&sale).await.paused, "nothing refused changed the sale");
}

/// A sale re-seeded while it is ended: the end stands once both answered. The end's Redis call ran
/// while the seed waited for the sale's row (here held by the test), and the seed then wrote the
/// sale's meta over it: the sale sold again (here: not started) while the end had answered 200 and
/// its row said ended. The end now waits for the row before its Redis call.
#[tokio::test]
async fn a_sale_reseeded_while_it_ends_stays_ended() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    let at = (time::OffsetDateTime::now_utc() + time::Duration::HOUR)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let body = json!({"stock": 3, "starts_at": at});
    assert_eq!(app.seed(&sale, body.clone()).await.status(), 200);
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("select 1 from sales where sale_id = $1 for update").bind(&sale).execute(&mut *holder).await.unwrap();
    let seeding = app.seed(&sale, body);
    let ending = async {
        crate::helpers::lock_waiters(&app.pool, 1).await; // the seed, on the sale's row
        control(&app, &sale, "end", None).await
    };
    let release = async {
        crate::helpers::lock_waiters(&app.pool, 2).await; // and the end
        holder.commit().await.unwrap();
    };
    let (seeded, ended, ()) = tokio::join!(seeding, ending, release);
    assert_eq!((seeded.status().as_u16(), ended.status().as_u16()), (200, 200));
    assert_error(app.buy(&sale, "late").await, 403, "sale_ended").await;
    assert_eq!(public_state(&app, &sale).await, "ended");
}

#[tokio::test]
async fn ending_a_sale_now_refuses_buys_as_ended_in_redis_and_postgres() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    let ended = control(&app, &sale, "end", Some(json!({"reason": "warehouse fire"}))).await;
    assert_eq!(ended.status(), 200);
    let status: Value = ended.json().await.unwrap();
    assert!(status["ends_at"].is_string(), "{status}");
    assert_error(app.buy(&sale, "u").await, 403, "sale_ended").await;
    assert_eq!(public_state(&app, &sale).await, "ended");
    let in_postgres: Option<time::OffsetDateTime> = sqlx::query_scalar("select ends_at from sales where sale_id = $1")
        .bind(&sale)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(in_postgres.is_some_and(|end| end <= time::OffsetDateTime::now_utc()), "{in_postgres:?}");
}

#[tokio::test]
async fn stock_can_be_taken_back_only_while_unsold_and_stock_initial_follows_everywhere() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 5).await;
    for user in ["a", "b"] {
        assert_eq!(app.buy(&sale, user).await.status(), 201);
    }
    let take = |add: i64| control(&app, &sale, "stock", Some(json!({"add": add})));
    assert_error(take(-4).await, 409, "stock_below_zero").await;
    assert_eq!(take(0).await.status(), 200, "nothing to change");
    assert_error(take(10_000_000).await, 409, "stock_too_large").await;
    // Out of bounds whatever its sign: the most negative i64 has no absolute value.
    for add in [i64::MIN, i64::MIN + 1, -10_000_001, 10_000_001, i64::MAX] {
        assert_error(take(add).await, 400, "invalid_request").await;
    }
    assert_eq!(app.status(&sale).await.stock_initial, 5, "a refusal changes nothing");

    assert_eq!(take(-3).await.status(), 200);
    let status = app.status(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold), (2, 0, 2));
    assert_eq!(app.sales_row_stock(&sale).await, 2, "Postgres's record follows");
    assert_error(app.buy(&sale, "c").await, 410, "sold_out").await;

    assert_eq!(take(1).await.status(), 200);
    assert_eq!(app.buy(&sale, "c").await.status(), 201, "the instance that changed the stock sells at once");
    let status = app.wait_for_drain(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold), (3, 0, 3));
    assert_eq!(app.sales_row_stock(&sale).await, 3);
    let reconciled = app.client.get(app.url(&format!("/admin/sales/{sale}/reconcile"))).bearer_auth(ADMIN_TOKEN);
    let report: Value = reconciled.send().await.unwrap().json().await.unwrap();
    assert_eq!(report["consistent"], json!(true), "reconciliation agrees: {report}");

    let sharded = new_sale_id();
    assert_eq!(app.seed(&sharded, json!({"stock": 10, "shards": 2})).await.status(), 200);
    let refused = control(&app, &sharded, "stock", Some(json!({"add": 5}))).await;
    assert_error(refused, 409, "sale_sharded").await;
}

/// An operator's body over the limit is refused as JSON, as every bad input is (actix's own
/// answer was a plain-text 413), and changes nothing.
#[tokio::test]
async fn an_operators_body_over_the_limit_gets_a_json_413() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    let huge = json!({"reason": "x".repeat(300 * 1024)});
    assert_error(control(&app, &sale, "pause", Some(huge.clone())).await, 413, "payload_too_large").await;
    let url = app.url(&format!("/admin/orders/{}/cancel", uuid::Uuid::now_v7()));
    let response = app.client.post(url).bearer_auth(ADMIN_TOKEN).json(&huge).send().await.unwrap();
    assert_error(response, 413, "payload_too_large").await;
    assert_eq!(app.buy(&sale, "u").await.status(), 201, "the sale was not paused");
}

/// A top-up whose Redis call timed out but ran all the same (Redis held its writes past the
/// app's timeout) answers 200 with what it did, once: the change id it wrote, read after it on
/// the same connection, says it ran. On a private Redis: the pause holds every client's writes.
#[tokio::test]
async fn a_top_up_whose_call_timed_out_but_ran_answers_what_it_did() {
    let private = PrivateRedis::start();
    let app = spawn_app_with(
        |c| {
            c.redis_url = private.url().into();
            c.redis_timeout = Duration::from_secs(2);
        },
        false,
    )
    .await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 2})).await.status(), 200);
    // A first top-up loads the script, so the held one is the change itself, not its NOSCRIPT.
    assert_eq!(control(&app, &sale, "stock", Some(json!({"add": 1}))).await.status(), 200);
    // Every write waits 3 s, the top-up's script among them: the app's call times out at 2 s.
    private.hold_writes(3_000).await;
    let asked = Instant::now();
    let response = control(&app, &sale, "stock", Some(json!({"add": 5}))).await;
    let answered = asked.elapsed();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    assert_eq!((&body["stock_initial"], &body["stock_left"]), (&json!(8), &json!(8)), "made once: {body}");
    assert!(answered >= Duration::from_secs(2), "the call outlived the app's timeout: {answered:?}");
    let mut redis = redis::Client::open(private.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let stock: i64 = redis::AsyncCommands::get(&mut redis, format!("{}:{{sale:{sale}}}:stock", app.config.key_prefix))
        .await
        .unwrap();
    assert_eq!(stock, 8);
    assert_eq!(app.sales_row_stock(&sale).await, 8, "and recorded");
}

/// A stock change's call that arrives twice (a Redis Cluster client re-sends a call that timed
/// out, which may have run) changes the stock once: a sale's, and a drop's sizes'.
#[tokio::test]
async fn a_stock_change_sent_again_is_made_once() {
    use seckill::domain::{DropId, SaleId};
    use seckill::redis::keys::{DropKeys, SaleKeys};
    let app = spawn_app().await;
    let mut redis = app.redis.clone();
    let sale = new_sale_id();
    app.seed_stock(&sale, 2).await;
    let keys = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap());
    let change = |id: &str| {
        let mut call = seckill::redis::lua::RESTOCK.key(&keys.meta);
        call.key(&keys.stock).arg(3).arg(1_000_000).arg(id.to_owned());
        call
    };
    for sent in 1..=2 {
        let reply: (String, i64, i64) = change("c1").invoke_async(&mut redis).await.unwrap();
        assert_eq!(reply, ("ok".to_owned(), 5, 5), "sent {sent} times");
    }
    let reply: (String, i64, i64) = change("c2").invoke_async(&mut redis).await.unwrap();
    assert_eq!(reply, ("ok".to_owned(), 8, 8), "another change is made");
    let stock: i64 = redis::AsyncCommands::get(&mut redis, &keys.stock).await.unwrap();
    assert_eq!(stock, 8);

    let drop = format!("d{}", &new_sale_id()[..12]);
    let seeded = app
        .client
        .put(app.url(&format!("/admin/drops/{drop}")))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"sizes": {"40": {"stock": 3}, "41": {"stock": 2}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(seeded.status(), 200, "{}", seeded.text().await.unwrap());
    let drop_keys = DropKeys::new(&app.config.key_prefix, &DropId::parse(&drop).unwrap());
    let sizes = [format!("{drop}.40"), format!("{drop}.41")];
    let size_keys = sizes.clone().map(|size| SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&size).unwrap()));
    let change = |id: &str| {
        let mut call = seckill::redis::lua::DROP_RESTOCK.key(&drop_keys.sales);
        call.key(&drop_keys.line_meta).arg(1_000_000);
        for ((size, keys), add) in sizes.iter().zip(&size_keys).zip([2, -1]) {
            call.key(&keys.meta).key(&keys.stock).arg(size).arg(add);
        }
        call.arg(id.to_owned());
        call
    };
    for sent in 1..=2 {
        let reply: Vec<redis::Value> = change("d1").invoke_async(&mut redis).await.unwrap();
        let figures: Vec<String> = reply.iter().map(|v| redis::from_redis_value_ref::<String>(v).unwrap()).collect();
        assert_eq!(figures, ["ok", "5", "5", "1", "1"], "sent {sent} times");
    }
}

#[tokio::test]
async fn a_top_up_on_one_instance_reopens_a_sold_out_sale_on_another_by_its_event() {
    // Flags that never lapse in the test: only the top-up's event can clear the other's.
    let here = spawn_app_with(|c| c.sold_out_flag_ttl = Duration::from_secs(3600), true).await;
    let there = spawn_instance_of(&here).await;
    let sale = new_sale_id();
    here.seed_stock(&sale, 1).await;
    assert_eq!(here.buy(&sale, "first").await.status(), 201);
    for _ in 0..2 {
        assert_error(there.buy(&sale, "second").await, 410, "sold_out").await; // the flag is set there
    }

    let asked = Instant::now();
    assert_eq!(control(&here, &sale, "stock", Some(json!({"add": 1}))).await.status(), 200);
    let answered = asked.elapsed();
    loop {
        let response = there.buy(&sale, "second").await;
        if response.status() == 201 {
            break;
        }
        assert!(asked.elapsed() < Duration::from_secs(20), "still refused after 20 s: {}", response.status());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("top-up answered in {answered:?}; the other instance sold {:?} after it was asked", asked.elapsed());
}

/// One buyer of a storm: when it asked and when it heard back, relative to the storm's start.
struct Attempt {
    instance: usize,
    sent: Duration,
    answered: Duration,
    status: u16,
    code: String,
}

/// One buyer of a storm on `apps[i % 2]`, as an [`Attempt`].
async fn attempt(apps: [&TestApp; 2], sale: &str, i: usize, start: Instant) -> Attempt {
    let instance = i % 2;
    let sent = start.elapsed();
    let response = apps[instance].buy(sale, &format!("buyer-{i}")).await;
    let answered = start.elapsed();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or_default();
    Attempt { instance, sent, answered, status, code: body["error"].as_str().unwrap_or_default().to_owned() }
}

/// Buyers one every 5 ms, alternating between `apps`, until `AFTER` have been sent since `since`
/// was set (each instance half of them), at most `MAX`: a storm that lasts past a control (a
/// pause, a top-up) however slow the host.
async fn storm_past(apps: [&TestApp; 2], sale: &str, since: &OnceLock<Duration>, start: Instant) -> Vec<Attempt> {
    const AFTER: usize = 40;
    const MAX: usize = 5_000;
    let mut in_flight = FuturesUnordered::new();
    let mut attempts = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    let (mut sent, mut sent_after) = (0, 0);
    loop {
        let sending = sent < MAX && sent_after < AFTER;
        tokio::select! {
            Some(done) = in_flight.next() => attempts.push(done),
            _ = tick.tick(), if sending => {
                if since.get().is_some() {
                    sent_after += 1;
                }
                in_flight.push(attempt(apps, sale, sent, start));
                sent += 1;
            }
            else => break,
        }
    }
    attempts
}

#[tokio::test]
async fn a_pause_mid_storm_stops_both_instances_at_once_and_nothing_sells_after_it_answered() {
    let here = spawn_app().await;
    let there = spawn_instance_of(&here).await;
    let sale = new_sale_id();
    here.seed_stock(&sale, 1_000).await;

    // The pause is sent once 50 have bought, and the storm goes on until 40 more buyers were
    // sent after it answered: the states, not the host's speed, set the storm's course.
    let start = Instant::now();
    let paused = OnceLock::new();
    let pause = async {
        let until = Instant::now() + Duration::from_secs(120);
        while here.status(&sale).await.sold < 50 {
            assert!(Instant::now() < until, "the storm never sold 50");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let sent = start.elapsed();
        assert_eq!(control(&here, &sale, "pause", None).await.status(), 200);
        let answered = start.elapsed();
        paused.set(answered).unwrap();
        (sent, answered)
    };
    let (attempts, (pause_sent, pause_answered)) =
        tokio::join!(storm_past([&here, &there], &sale, &paused, start), pause);

    let bought: Vec<&Attempt> = attempts.iter().filter(|a| a.status == 201).collect();
    assert!(bought.iter().all(|a| a.sent < pause_answered), "a purchase sent after the pause answered was made");
    assert!(bought.len() >= 50, "the pause came after 50 sold: {} bought", bought.len());
    for instance in 0..2 {
        let after: Vec<&Attempt> =
            attempts.iter().filter(|a| a.instance == instance && a.sent >= pause_answered).collect();
        assert!(after.len() >= 10, "instance {instance} was asked after the pause: {} times", after.len());
        for attempt in after {
            assert_eq!((attempt.status, attempt.code.as_str()), (403, "sale_paused"));
        }
        let last_sale = bought.iter().filter(|a| a.instance == instance).map(|a| a.answered).max();
        let first_refusal = attempts
            .iter()
            .filter(|a| a.instance == instance && a.code == "sale_paused")
            .map(|a| a.answered)
            .min()
            .expect("refused after the pause");
        println!(
            "instance {instance}: pause sent at {pause_sent:?}, answered at {pause_answered:?}; last 201 answered at \
             {last_sale:?}; first sale_paused answered {:?} after the pause was sent",
            first_refusal.saturating_sub(pause_sent)
        );
    }
    let status = here.assert_invariants(&sale, &Default::default()).await;
    assert_eq!(status.sold as usize, bought.len(), "every 201 is a sale, and nothing else sold: {status:?}");
    assert_eq!(status.persisted, Some(bought.len() as i64));
}

#[tokio::test]
async fn a_top_up_mid_storm_sells_exactly_the_added_units_on_both_instances() {
    let here = spawn_app().await;
    let there = spawn_instance_of(&here).await;
    let sale = new_sale_id();
    here.seed_stock(&sale, 30).await;

    // The top-up is sent once the 30 are sold, and the storm goes on until 40 more buyers were
    // sent after it answered (20 to the instance that made it): the states, not the host's speed,
    // set the storm's course.
    let start = Instant::now();
    let topped = OnceLock::new();
    let top_up = async {
        let until = Instant::now() + Duration::from_secs(120);
        while here.status(&sale).await.sold < 30 {
            assert!(Instant::now() < until, "the storm never sold 30");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            control(&there, &sale, "stock", Some(json!({"add": 20, "reason": "found a pallet"}))).await.status(),
            200
        );
        let answered = start.elapsed();
        topped.set(answered).unwrap();
        answered
    };
    let (attempts, topped_up) = tokio::join!(storm_past([&here, &there], &sale, &topped, start), top_up);

    let bought = attempts.iter().filter(|a| a.status == 201).count();
    assert_eq!(bought, 50, "the seeded 30 and the added 20, never more");
    let after = attempts.iter().filter(|a| a.status == 201 && a.sent >= topped_up).count();
    println!("top-up answered at {topped_up:?}; {after} of the 20 added units were bought by requests sent after it");
    for attempt in attempts.iter().filter(|a| a.status != 201) {
        assert_eq!((attempt.status, attempt.code.as_str()), (410, "sold_out"));
    }
    let status = here.assert_invariants(&sale, &Default::default()).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold, status.released), (50, 0, 50, 0));
    assert_eq!(status.persisted, Some(50));
    assert_eq!(here.sales_row_stock(&sale).await, 50);
}

#[tokio::test]
async fn every_operator_action_is_in_the_audit_trail_newest_first() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    assert_error(audit(&app, &sale, "").await, 404, "unknown_sale").await;
    let seed = json!({"stock": 10, "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2999-01-01T01:00:00.25+01:00"});
    assert_eq!(app.seed(&sale, seed).await.status(), 200);
    assert_eq!(control(&app, &sale, "pause", Some(json!({"reason": "price typo"}))).await.status(), 200);
    assert_eq!(control(&app, &sale, "resume", None).await.status(), 200);
    assert_eq!(control(&app, &sale, "stock", Some(json!({"add": 5, "reason": "more"}))).await.status(), 200);
    assert_error(control(&app, &sale, "stock", Some(json!({"add": -50}))).await, 409, "stock_below_zero").await;
    assert_eq!(control(&app, &sale, "end", None).await.status(), 200);

    let response = audit(&app, &sale, "").await;
    assert_eq!(response.status(), 200);
    let trail: Value = response.json().await.unwrap();
    let entries = trail["entries"].as_array().unwrap();
    let actions: Vec<&str> = entries.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["end", "stock", "resume", "pause", "seed"], "a refusal is not an action: {trail}");
    assert_eq!(entries[1]["effect"], json!({"add": 5, "stock_initial": 15, "stock_left": 15}));
    assert_eq!(entries[1]["reason"], "more");
    assert_eq!(entries[3]["reason"], "price typo");
    assert_eq!(entries[4]["effect"]["stock"], 10);
    assert!(entries.iter().all(|e| e["at"].is_string()));
    assert!(entries.iter().all(|e| e["actor"] == "admin-token"), "the shared token's actor: {trail}");
    // Every instant in an effect is RFC 3339 in UTC, whichever action wrote it.
    assert_eq!(entries[4]["effect"]["starts_at"], "2020-01-01T00:00:00Z", "the seed's: {trail}");
    assert_eq!(entries[4]["effect"]["ends_at"], "2999-01-01T00:00:00.25Z", "the seed's: {trail}");
    let instants: Vec<&Value> = entries
        .iter()
        .flat_map(|e| e["effect"].as_object().unwrap().iter())
        .filter(|(name, value)| name.ends_with("_at") && !value.is_null())
        .map(|(_, value)| value)
        .collect();
    assert_eq!(instants.len(), 5, "the seed's two, and each switch's ends_at: {trail}");
    for instant in instants {
        let text = instant.as_str().unwrap_or_else(|| panic!("an instant that is no string: {instant}"));
        let parsed = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339);
        assert!(parsed.is_ok_and(|t| t.offset().is_utc()) && text.ends_with('Z'), "not RFC 3339 in UTC: {text}");
    }

    let two: Value = audit(&app, &sale, "?limit=2").await.json().await.unwrap();
    assert_eq!(two["entries"].as_array().unwrap().len(), 2);
    assert_error(audit(&app, &sale, "?limit=101").await, 400, "invalid_request").await;
    assert_error(audit(&app, &sale, "?limt=5").await, 400, "invalid_request").await; // a misspelt parameter
    let anonymous = app.client.get(app.url(&format!("/admin/sales/{sale}/audit"))).send().await.unwrap();
    assert_error(anonymous, 401, "unauthorized").await;
}

#[tokio::test]
async fn a_sharded_sale_pauses_on_every_shard() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 10, "shards": 2})).await.status(), 200);
    let paused: Value = control(&app, &sale, "pause", None).await.json().await.unwrap();
    assert_eq!(paused["paused"], true);
    for i in 0..20 {
        assert_error(app.buy(&sale, &format!("u{i}")).await, 403, "sale_paused").await; // users of both shards
    }
    assert_eq!(control(&app, &sale, "resume", None).await.status(), 200);
    for i in 0..10 {
        assert_eq!(app.buy(&sale, &format!("u{i}")).await.status(), 201, "u{i}");
    }
    let status = app.wait_for_drain(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold, status.shards), (10, 0, 10, 2));
}

#[tokio::test]
async fn a_retirement_by_hand_and_one_by_the_janitor_are_in_the_audit_trail() {
    let app = spawn_app_with(quick_janitor, true).await;
    let (by_hand, by_janitor) = (new_sale_id(), new_sale_id());
    app.seed(&by_hand, json!({"stock": 1, "starts_at": "2999-01-01T00:00:00Z"})).await;
    app.seed_stock(&by_janitor, 1).await;
    assert_eq!(app.buy(&by_janitor, "u").await.status(), 201);
    assert_eq!(control(&app, &by_hand, "end", None).await.status(), 200);
    let retired = app.client.delete(app.url(&format!("/admin/sales/{by_hand}"))).bearer_auth(ADMIN_TOKEN);
    assert_eq!(retired.send().await.unwrap().status(), 200, "an ended sale without orders retires at once");

    let hand: Value = audit(&app, &by_hand, "").await.json().await.unwrap();
    let entry = &hand["entries"][0];
    assert_eq!((entry["action"].as_str(), entry["actor"].as_str()), (Some("retire"), Some("admin-token")));
    assert_eq!(hand["entries"][0]["effect"]["sale_id"], by_hand.as_str());
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let janitor: Value = audit(&app, &by_janitor, "").await.json().await.unwrap();
        if janitor["entries"][0]["action"] == "retire" {
            assert_eq!(janitor["entries"][0]["actor"], "janitor");
            break;
        }
        assert!(Instant::now() < until, "the janitor did not retire the sold-out sale: {janitor}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A statement Postgres cancels (its statement timeout, here while a seed waits for its sale's
/// row) is an outage: 503 with Retry-After, not 500. Nothing was seeded, and the seed sent again
/// once the row is free is made.
#[tokio::test]
async fn a_statement_postgres_cancels_answers_503_and_changes_nothing() {
    let app = spawn_app_with(|c| c.database.statement_timeout = Duration::from_secs(1), false).await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 2})).await.status(), 200);
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("select 1 from sales where sale_id = $1 for update").bind(&sale).execute(&mut *holder).await.unwrap();
    let response = app.seed(&sale, json!({"stock": 5})).await;
    assert_eq!(response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned()), Some("1".into()));
    assert_error(response, 503, "unavailable").await;
    holder.rollback().await.unwrap();
    assert_eq!(app.status(&sale).await.stock_initial, 2, "nothing was seeded");
    assert_eq!(app.seed(&sale, json!({"stock": 5})).await.status(), 200);
    assert_eq!(app.status(&sale).await.stock_initial, 5);
}

/// A stock change made in Redis that Postgres then cannot record (the audit's insert waits past
/// the statement timeout) answers 500 `not_recorded`, not a 503 whose retry would add the units
/// twice: the change stands once.
#[tokio::test]
async fn a_stock_change_postgres_cannot_record_answers_not_recorded() {
    let app = spawn_app_with(|c| c.database.statement_timeout = Duration::from_secs(1), false).await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 2})).await.status(), 200);
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("lock table sale_audit in exclusive mode").execute(&mut *holder).await.unwrap();
    let response = control(&app, &sale, "stock", Some(json!({"add": 3}))).await;
    assert!(response.headers().get("retry-after").is_none(), "nothing invites a retry");
    assert_error(response, 500, "not_recorded").await;
    holder.rollback().await.unwrap();
    assert_eq!(app.status(&sale).await.stock_initial, 5, "made once, in Redis");
}
