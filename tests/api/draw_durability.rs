//! A draw's entries through crashes, instances and retirement: entries a dead worker left pending
//! are claimed and stored once, a storm over two instances is stored entry for entry, a retired
//! drop takes its draw's keys along (Postgres keeps the entries), and Redis down is 503.

use std::time::Duration;

use futures::StreamExt;
use redis::AsyncCommands;
use redis::streams::{StreamReadOptions, StreamReadReply};
use seckill::orders::worker::StepOutcome;
use seckill::redis::order_stream::CONSUMER_GROUP;
use serde_json::json;

use crate::common::drops::new_drop_id;
use crate::draw_entries::{enter, in_redis, keys, open_draw, public, stored, wait_stored};
use crate::helpers::{ADMIN_TOKEN, assert_error, spawn_app, spawn_app_with, spawn_instance_of};

#[tokio::test]
async fn entries_left_pending_by_a_dead_worker_are_claimed_and_stored_once() {
    let app = spawn_app_with(|_| {}, false).await;
    let drop = open_draw(&app).await;
    for user in ["ann", "bob", "cat", "dan", "eve"] {
        assert_eq!(enter(&app, &drop, json!({"sizes": ["41", "43"], "user_id": user})).await.status(), 201);
    }
    // A worker read the entries and died before its acknowledgement.
    let stream = keys(&app, &drop).entry_stream;
    let options = StreamReadOptions::default().group(CONSUMER_GROUP, "dead").count(100);
    let read: Option<StreamReadReply> = app.redis.clone().xread_options(&[&stream], &[">"], &options).await.unwrap();
    assert_eq!(read.unwrap().keys[0].ids.len(), 5);
    tokio::time::sleep(Duration::from_millis(30)).await;

    let mut worker = app.manual_worker("rescuer", Duration::from_millis(20));
    let mut rounds = 0;
    while worker.step().await.unwrap() != StepOutcome::Idle || stored(&app, &drop).await < 5 {
        rounds += 1;
        assert!(rounds < 100, "the rescuer never stored the entries");
    }
    assert_eq!(worker.stats().reclaimed, 5);
    assert_eq!(worker.stats().draw_entries, 5);
    assert_eq!(stored(&app, &drop).await, 5);
    let sizes: Vec<String> =
        sqlx::query_scalar("select sizes[1] || ',' || sizes[2] from draw_entries where drop_id = $1")
            .bind(&drop)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert!(sizes.iter().all(|s| s == "41,43"), "{sizes:?}");
    assert_eq!(in_redis(&app, &drop).await, (5, 0), "the hash keeps the entries, the stream is trimmed");
    // A redelivery of stored entries writes nothing again.
    let again: i64 = sqlx::query_scalar("select count(*) from draw_entries").fetch_one(&app.pool).await.unwrap();
    assert_eq!(again, 5);
}

#[tokio::test]
async fn a_storm_of_distinct_buyers_over_two_instances_is_stored_entry_for_entry() {
    let app = spawn_app().await;
    let other = spawn_instance_of(&app).await;
    let drop = open_draw(&app).await;
    let created = futures::stream::iter(0..2000)
        .map(|i| {
            let (app, other, drop) = (&app, &other, &drop);
            async move {
                let instance = if i % 2 == 0 { app } else { other };
                let sizes = if i % 3 == 0 { json!(["41", "42"]) } else { json!(["43"]) };
                enter(instance, drop, json!({"sizes": sizes, "user_id": format!("buyer-{i}")})).await.status().as_u16()
            }
        })
        .buffer_unordered(64)
        .filter(|status| std::future::ready(*status == 201))
        .count()
        .await as i64;
    assert_eq!(created, 2000);
    assert_eq!(in_redis(&app, &drop).await.0, created);
    wait_stored(&app, &drop, created).await;
    assert_eq!(public(&app, &drop).await["draw"]["entries"], created);
}

#[tokio::test]
async fn a_draws_keys_go_with_its_drops_last_retired_size_and_postgres_keeps_its_entries() {
    let app = spawn_app().await;
    let drop = open_draw(&app).await;
    for user in ["ann", "bob", "cat"] {
        assert_eq!(enter(&app, &drop, json!({"sizes": ["42"], "user_id": user})).await.status(), 201);
    }
    wait_stored(&app, &drop, 3).await;
    // Drawn (a size waits for its draw before it retires), the winners' reservations cancelled
    // (an open one holds its size too), their orders stored, the drop ended.
    let url = app.url(&format!("/admin/drops/{drop}/draw"));
    let drawn = app.client.post(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(drawn.status(), 200, "{}", drawn.text().await.unwrap());
    let won = format!("{drop}.42");
    for user in ["ann", "bob", "cat"] {
        assert_eq!(app.cancel(&won, user).await.status(), 200, "{user}");
    }
    app.wait_for_drain(&won).await;
    let url = app.url(&format!("/admin/drops/{drop}/end"));
    assert_eq!(app.client.post(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().status(), 200);
    let keys = keys(&app, &drop);
    let exists = async |key: &str| -> bool { app.redis.clone().exists(key).await.unwrap() };
    for size in ["41", "42", "43"] {
        assert!(exists(&keys.entries).await, "the draw lives on until the last size goes");
        let url = app.url(&format!("/admin/sales/{drop}.{size}"));
        let response = app.client.delete(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
        assert_eq!(response.status(), 200, "retire {size}: {}", response.text().await.unwrap());
    }
    for key in [&keys.draw, &keys.entries, &keys.entry_stream] {
        assert!(!exists(key).await, "{key} outlived the drop");
    }
    let registry = seckill::redis::keys::draws_registry_key(&app.config.key_prefix);
    let registered: bool = app.redis.clone().sismember(&registry, &drop).await.unwrap();
    assert!(!registered, "the workers stop reading its stream");
    assert_eq!(stored(&app, &drop).await, 3);
}

#[tokio::test]
async fn entries_answer_503_when_redis_is_down_and_store_nothing() {
    let app = spawn_app_with(|c| c.redis_url = "redis://127.0.0.1:1".to_owned().into(), false).await;
    let drop = new_drop_id();
    assert_error(enter(&app, &drop, json!({"sizes": ["41"], "user_id": "ann"})).await, 503, "unavailable").await;
    let url = app.url(&format!("/drops/{drop}/entry"));
    assert_error(app.client.get(url).query(&[("user_id", "ann")]).send().await.unwrap(), 503, "unavailable").await;
    assert_eq!(stored(&app, &drop).await, 0);
}

/// A size of a drop whose draw has not been drawn is not retired (its awards need it: retired,
/// the draw's every run would fail on it); once drawn, it is.
#[tokio::test]
async fn a_size_waits_for_its_draw_before_it_retires() {
    let app = spawn_app_with(|_| {}, false).await;
    let drop = open_draw(&app).await;
    let url = app.url(&format!("/admin/drops/{drop}/end"));
    assert_eq!(app.client.post(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().status(), 200);
    let retire = async || {
        let url = app.url(&format!("/admin/sales/{drop}.41"));
        app.client.delete(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap()
    };
    let refused = retire().await;
    assert_eq!(refused.status(), 409);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!((&body["error"], &body["reasons"]), (&json!("not_retirable"), &json!(["draw_pending"])), "{body}");

    let url = app.url(&format!("/admin/drops/{drop}/draw"));
    let drawn = app.client.post(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(drawn.status(), 200, "{}", drawn.text().await.unwrap());
    assert_eq!(retire().await.status(), 200);
}

/// A draw meta Redis lost after the draw ran early (an eviction, a clean-up by hand) comes back
/// from the repair drawn, as Postgres has it, not open: entries stay closed (the runner never
/// draws a drawn draw again, so an entry accepted then would wait for ever) and the seed stays
/// revealed.
#[tokio::test]
async fn a_drawn_draw_whose_meta_redis_lost_comes_back_drawn() {
    let app = spawn_app().await;
    let drop = open_draw(&app).await;
    assert_eq!(enter(&app, &drop, json!({"sizes": ["41"], "user_id": "ann"})).await.status(), 201);
    wait_stored(&app, &drop, 1).await;
    let run = crate::draw_run::run_now(&app, &drop).await;
    assert_eq!(run.status(), 200, "{}", run.text().await.unwrap());
    let _: () = app.redis.clone().del(&keys(&app, &drop).draw).await.unwrap();

    crate::redis_loss::repair(&app, &format!("{drop}.41")).await;
    let state: Option<String> = app.redis.clone().hget(&keys(&app, &drop).draw, "state").await.unwrap();
    assert_eq!(state.as_deref(), Some("drawn"));
    assert_error(enter(&app, &drop, json!({"sizes": ["42"], "user_id": "late"})).await, 409, "entries_closed").await;
    let view = public(&app, &drop).await;
    assert!(view["draw"]["seed"].is_string(), "the seed stays revealed: {view}");
}
