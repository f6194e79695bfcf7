//! Drops: a product's sizes seeded, read, switched and restocked whole (`PUT /admin/drops/{drop}`
//! and the rest), on one instance and two.

use redis::AsyncCommands;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::draw_entries::{at, put_draw};
use crate::helpers::{ADMIN_TOKEN, PrivateRedis, TestApp, assert_error, spawn_app, spawn_instance_of};

fn new_drop_id() -> String {
    format!("drop-{}", &Uuid::now_v7().simple().to_string()[..20])
}

async fn put_drop(app: &TestApp, drop: &str, body: Value) -> reqwest::Response {
    let url = app.url(&format!("/admin/drops/{drop}"));
    app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap()
}

async fn admin_drop(app: &TestApp, drop: &str) -> reqwest::Response {
    app.client.get(app.url(&format!("/admin/drops/{drop}"))).bearer_auth(ADMIN_TOKEN).send().await.unwrap()
}

async fn post_drop(app: &TestApp, drop: &str, action: &str, body: Value) -> reqwest::Response {
    let url = app.url(&format!("/admin/drops/{drop}/{action}"));
    app.client.post(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap()
}

async fn buy_units(app: &TestApp, sale: &str, user: &str, quantity: u32) -> reqwest::Response {
    let body = json!({"sale_id": sale, "user_id": user, "quantity": quantity});
    app.client.post(app.url("/buy")).json(&body).send().await.unwrap()
}

async fn audit_actions(app: &TestApp, drop: &str) -> Vec<String> {
    let url = app.url(&format!("/admin/drops/{drop}/audit"));
    let trail: Value = app.client.get(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
    trail["entries"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap().to_owned()).collect()
}

/// How many of the drop's sizes' rows have not ended.
async fn open_size_rows(app: &TestApp, drop: &str) -> i64 {
    sqlx::query_scalar("select count(*) from sales where sale_id like $1 and (ends_at is null or ends_at > now())")
        .bind(format!("{drop}.%"))
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// Each size's `(name, state, stock_left)` in a drop's answer.
fn sizes_of(body: &Value) -> Vec<(String, String, i64)> {
    body["sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let left = s["sale"]["stock_left"].as_i64().or(s["stock_left"].as_i64()).unwrap();
            (s["size"].as_str().unwrap().to_owned(), s["state"].as_str().unwrap().to_owned(), left)
        })
        .collect()
}

#[tokio::test]
async fn a_drop_is_seeded_whole_and_read_whole() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let seeded =
        put_drop(&app, &drop, json!({"sizes": {"40": {"stock": 3}, "41": {"stock": 2}}, "per_buyer": 2})).await;
    assert_eq!(seeded.status(), 200);
    let body: Value = seeded.json().await.unwrap();
    assert_eq!(sizes_of(&body), [("40".into(), "open".into(), 3), ("41".into(), "open".into(), 2)]);
    assert_eq!(body["totals"]["stock_initial"], 5);

    // One limit across the sizes.
    assert_eq!(buy_units(&app, &format!("{drop}.40"), "ann", 1).await.status(), 201);
    assert_eq!(buy_units(&app, &format!("{drop}.41"), "ann", 1).await.status(), 201);
    assert_error(buy_units(&app, &format!("{drop}.41"), "bob", 3).await, 409, "limit_reached").await;
    assert_eq!(buy_units(&app, &format!("{drop}.41"), "bob", 1).await.status(), 201);

    let body: Value = admin_drop(&app, &drop).await.json().await.unwrap();
    assert_eq!(sizes_of(&body), [("40".into(), "open".into(), 2), ("41".into(), "sold_out".into(), 0)]);
    assert_eq!((body["totals"]["stock_left"].as_i64(), body["totals"]["units_sold"].as_i64()), (Some(2), Some(3)));
    // The public view may show a snapshot a moment old: it shows the size sold out soon after.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let public = loop {
        let public: Value =
            app.client.get(app.url(&format!("/drops/{drop}"))).send().await.unwrap().json().await.unwrap();
        assert_eq!(public["per_buyer"], 2);
        assert_eq!(public["sizes"][1]["sale_id"], format!("{drop}.41"));
        if public["sizes"][1]["state"] == "sold_out" {
            break public;
        }
        assert_eq!(public["sizes"][1]["state"], "open", "{public}");
        assert!(std::time::Instant::now() < until, "the public view never showed the size sold out: {public}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(public["sizes"][0]["state"], "open", "{public}");

    // One transaction: both sizes' rows, the drop's row, one audit entry.
    let rows: i64 = sqlx::query_scalar("select count(*) from sales where sale_id like $1")
        .bind(format!("{drop}.%"))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let drops: i64 = sqlx::query_scalar("select count(*) from drops where drop_id = $1 and per_buyer = 2")
        .bind(&drop)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!((rows, drops), (2, 1));
    assert_eq!(audit_actions(&app, &drop).await, ["drop_seed"]);

    // A drop with buyers is not re-seeded; a size is never left out; nothing changed.
    let again = put_drop(&app, &drop, json!({"sizes": {"40": {"stock": 9}, "41": {"stock": 9}}, "per_buyer": 2})).await;
    assert_eq!(again.status(), 409);
    let refusal: Value = again.json().await.unwrap();
    assert_eq!(
        (refusal["error"].as_str(), refusal["sale_id"].as_str()),
        (Some("drop_in_progress"), Some(&*format!("{drop}.40")))
    );
    let missing = put_drop(&app, &drop, json!({"sizes": {"40": {"stock": 9}}})).await;
    let refusal: Value = missing.json().await.unwrap();
    assert_eq!(refusal["error"], "drop_size_missing", "{refusal}");
    assert_eq!(app.status(&format!("{drop}.40")).await.stock_initial, 3);
    // A size is seeded with its drop, never alone.
    assert_error(app.seed(&format!("{drop}.42"), json!({"stock": 1, "per_buyer": 2})).await, 409, "drop_size").await;
    assert_eq!(audit_actions(&app, &drop).await, ["drop_seed"]);
}

/// Whether `sale` is in the sales registry, and whether its orders stream exists.
async fn registered(app: &TestApp, sale: &str) -> (bool, bool) {
    let prefix = &app.config.key_prefix;
    let keys = seckill::redis::keys::SaleKeys::new(prefix, &seckill::domain::SaleId::parse(sale).unwrap());
    let registry = seckill::redis::keys::sales_registry_key(prefix);
    let mut redis = app.redis.clone();
    (redis.sismember(&registry, sale).await.unwrap(), redis.exists(&keys.orders).await.unwrap())
}

#[tokio::test]
async fn a_refused_seed_leaves_nothing_registered() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let sizes = json!({"40": {"stock": 3}, "41": {"stock": 3}});
    assert_eq!(put_drop(&app, &drop, json!({"sizes": sizes, "per_buyer": 2})).await.status(), 200);
    assert_eq!(app.buy(&format!("{drop}.40"), "ann").await.status(), 201);

    // A size seeded alone, a new size in a drop with buyers, a group's second sale whose limit
    // differs: each refused, and none left registered with a stream (the workers would report it
    // lost for good, and nothing could retire it).
    assert_error(app.seed(&format!("{drop}.42"), json!({"stock": 1, "per_buyer": 2})).await, 409, "drop_size").await;
    let sizes = json!({"40": {"stock": 3}, "41": {"stock": 3}, "43": {"stock": 3}});
    assert_error(put_drop(&app, &drop, json!({"sizes": sizes, "per_buyer": 2})).await, 409, "drop_in_progress").await;
    let group = new_drop_id();
    assert_eq!(app.seed(&format!("{group}.a"), json!({"stock": 1, "per_buyer": 2})).await.status(), 200);
    assert_error(
        app.seed(&format!("{group}.b"), json!({"stock": 1, "per_buyer": 3})).await,
        409,
        "group_limit_differs",
    )
    .await;
    for sale in [format!("{drop}.42"), format!("{drop}.43"), format!("{group}.b")] {
        assert_eq!(registered(&app, &sale).await, (false, false), "{sale}");
    }
    // What was seeded stays.
    for sale in [format!("{drop}.40"), format!("{drop}.41"), format!("{group}.a")] {
        assert_eq!(registered(&app, &sale).await, (true, true), "{sale}");
    }

    // A draw over a group seeded sale by sale: refused, its draw not registered either.
    let draw = json!({"opens_at": at(-60), "closes_at": at(3600)});
    assert_error(put_draw(&app, &group, draw).await, 409, "not_a_drop").await;
    let prefix = &app.config.key_prefix;
    let draws = seckill::redis::keys::draws_registry_key(prefix);
    let draw_registered: bool = app.redis.clone().sismember(&draws, &group).await.unwrap();
    let keys = seckill::redis::keys::DropKeys::new(prefix, &seckill::domain::DropId::parse(&group).unwrap());
    let stream: bool = app.redis.clone().exists(&keys.entry_stream).await.unwrap();
    assert_eq!((draw_registered, stream), (false, false));
    for size in ["41", "42", "43"] {
        assert_eq!(registered(&app, &format!("{group}.{size}")).await, (false, false), "{size}");
    }
}

#[tokio::test]
async fn a_drop_seed_refuses_bad_input_and_unknown_drops_are_404() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let too_many: serde_json::Map<String, Value> = (0..65).map(|i| (format!("s{i}"), json!({"stock": 1}))).collect();
    for body in [
        json!({"sizes": {}}),
        json!({"sizes": too_many}),
        json!({"sizes": {"4.0": {"stock": 1}}}),
        json!({"sizes": {"x".repeat(60): {"stock": 1}}}),
        json!({"sizes": {"40": {"stock": -1}}}),
        json!({"sizes": {"40": {"stock": 1}}, "per_buyer": 0}),
        json!({"sizes": {"40": {"stock": 1}}, "waiting_room": {"opens_at": "2030-01-01T00:00:00Z", "rate": 5}}),
        json!({"sizes": {"40": {"stock": 1}}, "shards": 2}),
        // Valid RFC 3339, but past the year 9999 in UTC: Postgres's encoding of it panicked.
        json!({"sizes": {"40": {"stock": 1}}, "ends_at": "9999-12-31T23:59:59-01:00"}),
        json!({"sizes": {"40": {"stock": 1}}, "payment_window": "10m",
               "draw": {"opens_at": "2030-01-01T00:00:00Z", "closes_at": "9999-12-31T23:59:59-01:00"}}),
    ] {
        assert_error(put_drop(&app, &drop, body.clone()).await, 400, "invalid_request").await;
    }
    assert_error(put_drop(&app, "a.b", json!({"sizes": {"40": {"stock": 1}}})).await, 400, "invalid_request").await;
    assert_error(admin_drop(&app, &drop).await, 404, "unknown_drop").await;
    assert_error(app.client.get(app.url(&format!("/drops/{drop}"))).send().await.unwrap(), 404, "unknown_drop").await;
    assert_error(post_drop(&app, &drop, "pause", json!({})).await, 404, "unknown_drop").await;
    let rows: i64 = sqlx::query_scalar("select count(*) from sale_audit").fetch_one(&app.pool).await.unwrap();
    assert_eq!(rows, 0, "nothing recorded");

    // A group seeded sale by sale is not taken over.
    let group = new_drop_id();
    app.seed_stock(&format!("{group}.1"), 1).await;
    assert_error(put_drop(&app, &group, json!({"sizes": {"1": {"stock": 5}}})).await, 409, "not_a_drop").await;
}

#[tokio::test]
async fn a_drop_with_a_waiting_room_writes_its_lines_meta() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let body = json!({
        "sizes": {"40": {"stock": 4}, "41": {"stock": 6}},
        "starts_at": "2099-01-01T00:10:00Z",
        "waiting_room": {"opens_at": "2099-01-01T00:00:00Z", "rate": 50},
        "challenge": {"cost": 100},
    });
    assert_eq!(put_drop(&app, &drop, body.clone()).await.status(), 200);
    let mut redis = app.redis.clone();
    let prefix = &app.config.key_prefix;
    let line: std::collections::HashMap<String, String> =
        redis.hgetall(format!("{prefix}:{{group:{drop}}}:line:meta")).await.unwrap();
    assert_eq!(line.get("stock_initial").map(String::as_str), Some("10"));
    assert_eq!(line.get("queue_rate").map(String::as_str), Some("50"));
    assert_eq!(line.get("challenge_cost").map(String::as_str), Some("100"));
    assert_eq!(line.get("queue_opens_at_ms").map(String::as_str), Some("4070908800000"));
    let seed: String = redis.hget(format!("{prefix}:{{group:{drop}}}:line:queue:state"), "seed").await.unwrap();
    assert_eq!(line.get("queue_seed"), Some(&seed));
    let size: std::collections::HashMap<String, String> =
        redis.hgetall(format!("{prefix}:{{group:{drop}}}:sale:{drop}.41:meta")).await.unwrap();
    assert_eq!(
        (size.get("queue_rate").map(String::as_str), size.get("line").map(String::as_str)),
        (Some("50"), Some("drop"))
    );
    assert!(!size.contains_key("challenge_cost"), "the line asks the proof, once per join: {size:?}");

    // Without the waiting room, the line is gone; the seed stays for a line seeded again, in Redis
    // and in Postgres (whose row drew another when the line came back).
    let without = json!({"sizes": {"40": {"stock": 4}, "41": {"stock": 6}}, "starts_at": "2099-01-01T00:10:00Z"});
    assert_eq!(put_drop(&app, &drop, without).await.status(), 200);
    let exists: bool = redis.exists(format!("{prefix}:{{group:{drop}}}:line:meta")).await.unwrap();
    assert!(!exists);
    assert_eq!(put_drop(&app, &drop, body).await.status(), 200);
    let again: String = redis.hget(format!("{prefix}:{{group:{drop}}}:line:queue:state"), "seed").await.unwrap();
    let row: String = sqlx::query_scalar("select encode(line_seed, 'hex') from drops where drop_id = $1")
        .bind(&drop)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!((&again, &row), (&seed, &seed), "Redis's seed, then the row's");
}

/// Seeds `group` as more sales one by one than a drop may have (`<group>.0` to `<group>.64`).
async fn seed_too_many_sizes(app: &TestApp, group: &str) {
    for size in 0..65 {
        let seeded = app.seed(&format!("{group}.{size}"), json!({"stock": 5, "group": group})).await;
        assert_eq!(seeded.status(), 200, "seeding {group}.{size}");
    }
}

/// A drop's switch on a group seeded sale by sale with more sales than a drop may have: 409,
/// nothing switched (it answered 500: the script refused the sizes named as changed on every
/// attempt, as the group set held one more).
#[tokio::test]
async fn a_drop_switch_on_a_group_of_more_sales_than_a_drop_is_refused_409_and_switches_nothing() {
    let app = spawn_app().await;
    let group = new_drop_id();
    seed_too_many_sizes(&app, &group).await;
    for action in ["pause", "end"] {
        assert_error(post_drop(&app, &group, action, json!({})).await, 409, "not_a_drop").await;
    }
    for size in [0, 64] {
        assert_eq!(
            app.buy(&format!("{group}.{size}"), &format!("buyer-{size}")).await.status(),
            201,
            "{size} still sells"
        );
    }
    let url = app.url(&format!("/admin/drops/{group}/audit"));
    let trail: Value = app.client.get(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
    assert_eq!(trail["entries"], json!([]), "nothing recorded: {trail}");
}

#[tokio::test]
async fn a_drop_pause_stops_every_size_on_every_instance_and_resume_and_end_follow() {
    let app = spawn_app().await;
    let other = spawn_instance_of(&app).await;
    let drop = new_drop_id();
    let sizes = json!({"40": {"stock": 5}, "41": {"stock": 5}, "42": {"stock": 5}});
    assert_eq!(put_drop(&app, &drop, json!({"sizes": sizes, "per_buyer": 3})).await.status(), 200);
    assert_eq!(other.buy(&format!("{drop}.42"), "warm").await.status(), 201);

    let paused = post_drop(&app, &drop, "pause", json!({"reason": "price typo"})).await;
    assert_eq!(paused.status(), 200);
    let body: Value = paused.json().await.unwrap();
    assert!(sizes_of(&body).iter().all(|(_, state, _)| state == "paused"), "{body}");
    // From the answer on: no size sells, on either instance.
    for (i, size) in ["40", "41", "42"].iter().enumerate() {
        for instance in [&app, &other] {
            assert_error(instance.buy(&format!("{drop}.{size}"), &format!("late{i}")).await, 403, "sale_paused").await;
        }
    }
    assert_eq!(audit_actions(&app, &drop).await, ["drop_pause", "drop_seed"]);
    let size_trail: Value = app
        .client
        .get(app.url(&format!("/admin/sales/{drop}.41/audit")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(size_trail["entries"][0]["reason"], "price typo", "a size's trail shows its drop's: {size_trail}");

    assert_eq!(post_drop(&app, &drop, "resume", json!({})).await.status(), 200);
    assert_eq!(other.buy(&format!("{drop}.40"), "after").await.status(), 201);

    let ended = post_drop(&app, &drop, "end", json!({"reason": "done"})).await;
    assert_eq!(ended.status(), 200);
    for size in ["40", "41", "42"] {
        assert_error(other.buy(&format!("{drop}.{size}"), "too-late").await, 403, "sale_ended").await;
    }
    let open_rows = open_size_rows(&app, &drop).await;
    let drop_ended: bool = sqlx::query_scalar("select ends_at <= now() from drops where drop_id = $1")
        .bind(&drop)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!((open_rows, drop_ended), (0, true));
    assert_eq!(audit_actions(&app, &drop).await, ["drop_end", "drop_resume", "drop_pause", "drop_seed"]);
}

/// A drop's stock change whose Redis call timed out but ran all the same answers 200 with what it
/// did, once, as a sale's does (`controls::a_top_up_whose_call_timed_out_but_ran_answers_what_it_did`).
#[tokio::test]
async fn a_drop_stock_change_whose_call_timed_out_but_ran_answers_what_it_did() {
    let private = PrivateRedis::start();
    let app = crate::helpers::spawn_app_with(
        |c| {
            c.redis_url = private.url().into();
            c.redis_timeout = std::time::Duration::from_secs(2);
        },
        false,
    )
    .await;
    let drop = new_drop_id();
    assert_eq!(put_drop(&app, &drop, json!({"sizes": {"40": {"stock": 2}, "41": {"stock": 2}}})).await.status(), 200);
    // A first change loads the script, so the held one is the change itself.
    assert_eq!(post_drop(&app, &drop, "stock", json!({"add": {"40": 1}})).await.status(), 200);
    // Every write waits 3 s, the change's script among them: the app's call times out at 2 s.
    private.hold_writes(3_000).await;
    let asked = std::time::Instant::now();
    let done = post_drop(&app, &drop, "stock", json!({"add": {"40": 5, "41": -1}})).await;
    let answered = asked.elapsed();
    assert_eq!(done.status(), 200, "{}", done.text().await.unwrap());
    let body: Value = done.json().await.unwrap();
    assert_eq!(sizes_of(&body).iter().map(|s| s.2).collect::<Vec<_>>(), [8, 1], "made once: {body}");
    assert!(answered >= std::time::Duration::from_secs(2), "the call outlived the app's timeout: {answered:?}");
    for (size, stock) in [("40", 8), ("41", 1)] {
        assert_eq!(app.sales_row_stock(&format!("{drop}.{size}")).await, stock, "size {size}'s row follows");
    }
}

/// A size its retirement has marked (its keys still there, as in the retirement's grace) refuses
/// a stock change of the drop, naming it, and nothing changes in any size nor in its record; the
/// single sale's restock refuses it as well.
#[tokio::test]
async fn a_stock_change_of_a_size_marked_retired_is_refused() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let sizes = json!({"40": {"stock": 2}, "41": {"stock": 1}});
    assert_eq!(put_drop(&app, &drop, json!({"sizes": sizes})).await.status(), 200);
    let size = format!("{drop}.41");
    assert_eq!(app.buy(&size, "ann").await.status(), 201);
    app.wait_for_drain(&size).await;
    sqlx::query("update sales set retired_at = now() where sale_id = $1").bind(&size).execute(&app.pool).await.unwrap();

    let refused = post_drop(&app, &drop, "stock", json!({"add": {"40": 1, "41": 5}})).await;
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["sale_id"].as_str()), (Some("sale_retired"), Some(&*size)), "{body}");
    for (size, stock) in [("40", 2), ("41", 1)] {
        assert_eq!(app.sales_row_stock(&format!("{drop}.{size}")).await, stock, "size {size}'s row is unchanged");
    }
    assert_eq!(audit_actions(&app, &drop).await, ["drop_seed"]);
    let url = app.url(&format!("/admin/sales/{size}/stock"));
    let alone = app.client.post(url).bearer_auth(ADMIN_TOKEN).json(&json!({"add": 5})).send().await.unwrap();
    assert_error(alone, 410, "sale_retired").await;
    assert_eq!(app.sales_row_stock(&size).await, 1);
}

/// A size the repair is restoring (its meta marked, as the repair's seed of a lost size leaves it)
/// refuses a stock change of the drop, naming it, and no size changes.
#[tokio::test]
async fn a_stock_change_of_a_size_the_repair_is_restoring_is_refused() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let sizes = json!({"40": {"stock": 2}, "41": {"stock": 2}});
    assert_eq!(put_drop(&app, &drop, json!({"sizes": sizes})).await.status(), 200);
    let size = format!("{drop}.41");
    let meta = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&size).unwrap()).meta;
    let _: i64 = app.store.keyspace().conn().hset(&meta, "restoring", "1").await.unwrap();

    let refused = post_drop(&app, &drop, "stock", json!({"add": {"40": 1, "41": -2}})).await;
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["sale_id"].as_str()), (Some("sale_restoring"), Some(&*size)), "{body}");
    for (size, stock) in [("40", 2), ("41", 2)] {
        assert_eq!(app.sales_row_stock(&format!("{drop}.{size}")).await, stock, "size {size}'s row is unchanged");
    }
    assert_eq!(audit_actions(&app, &drop).await, ["drop_seed"]);
}

/// A drop ended twice keeps its first end, and so do its rows and the second `drop_end` entry of
/// the audit trail: it recorded the time of the second call as the end.
#[tokio::test]
async fn a_drop_ended_again_keeps_its_end_in_the_audit_trail() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    assert_eq!(put_drop(&app, &drop, json!({"sizes": {"40": {"stock": 2}}})).await.status(), 200);
    assert_eq!(post_drop(&app, &drop, "end", json!({})).await.status(), 200);
    let redis_ms = || async {
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut app.redis.clone()).await.unwrap();
        secs * 1000 + micros / 1000
    };
    let first_end = redis_ms().await;
    while redis_ms().await <= first_end + 5 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(post_drop(&app, &drop, "end", json!({})).await.status(), 200);
    let url = app.url(&format!("/admin/drops/{drop}/audit"));
    let trail: Value = app.client.get(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
    let ends: Vec<&Value> = trail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "drop_end")
        .map(|e| &e["effect"]["at"])
        .collect();
    assert_eq!(ends.len(), 2, "{trail}");
    assert_eq!(ends[0], ends[1], "the second end records the end kept: {trail}");
}

/// A drop re-seeded while it is ended: both answer, and the end stands in Redis and in Postgres.
/// The seed locks the sizes' rows, then the drop's; the end locked the drop's row, then the
/// sizes': with one size's row held (here by the test), the seed waited for it holding the first,
/// the end waited for the first holding the drop's row, and once the size was let go the two
/// waited on each other until Postgres broke the circle and one answered 500. Both now take the
/// drop's row first.
#[tokio::test]
async fn a_drop_reseeded_while_it_ends_answers_both() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let body = json!({"sizes": {"40": {"stock": 2}, "41": {"stock": 2}}});
    assert_eq!(put_drop(&app, &drop, body.clone()).await.status(), 200);
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("select 1 from sales where sale_id = $1 for update")
        .bind(format!("{drop}.41"))
        .execute(&mut *holder)
        .await
        .unwrap();
    let seeding = put_drop(&app, &drop, body);
    let ending = async {
        crate::helpers::lock_waiters(&app.pool, 1).await; // the seed, on size 41's row
        post_drop(&app, &drop, "end", json!({})).await
    };
    let release = async {
        crate::helpers::lock_waiters(&app.pool, 2).await; // and the end
        holder.commit().await.unwrap();
    };
    let (seeded, ended, ()) = tokio::join!(seeding, ending, release);
    assert_eq!((seeded.status().as_u16(), ended.status().as_u16()), (200, 200));
    for size in ["40", "41"] {
        assert_error(app.buy(&format!("{drop}.{size}"), "late").await, 403, "sale_ended").await;
    }
    let open_rows = open_size_rows(&app, &drop).await;
    assert_eq!(open_rows, 0, "the end is in every size's row");
    assert_eq!(audit_actions(&app, &drop).await, ["drop_end", "drop_seed", "drop_seed"]);
}

#[tokio::test]
async fn a_drops_stock_changes_all_or_nothing() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let sizes = json!({"40": {"stock": 2}, "41": {"stock": 2}, "42": {"stock": 1}});
    assert_eq!(put_drop(&app, &drop, json!({"sizes": sizes})).await.status(), 200);
    assert_eq!(app.buy(&format!("{drop}.42"), "ann").await.status(), 201);
    assert_error(app.buy(&format!("{drop}.42"), "bob").await, 410, "sold_out").await;

    let refused = post_drop(&app, &drop, "stock", json!({"add": {"40": 10, "41": -3}})).await;
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        (body["error"].as_str(), body["sale_id"].as_str(), body["stock_left"].as_i64()),
        (Some("stock_below_zero"), Some(&*format!("{drop}.41")), Some(2)),
        "{body}"
    );
    let too_much = post_drop(&app, &drop, "stock", json!({"add": {"40": 1, "42": 10_000_000}})).await;
    assert_error(too_much, 409, "stock_too_large").await;
    assert_error(post_drop(&app, &drop, "stock", json!({"add": {"43": 1}})).await, 400, "invalid_request").await;
    assert_error(post_drop(&app, &drop, "stock", json!({"add": {}})).await, 400, "invalid_request").await;
    // A malformed size is refused with 0 units too (it would change nothing, and says nothing).
    let malformed = post_drop(&app, &drop, "stock", json!({"add": {"no such size!": 0}})).await;
    assert_error(malformed, 400, "invalid_request").await;
    // A size named twice is ambiguous (serde's maps keep the last): refused, for the stock and the
    // seed alike.
    let twice = async |path: String, method: reqwest::Method, body: &'static str| {
        let request = app.client.request(method, app.url(&path)).bearer_auth(ADMIN_TOKEN);
        request.header("content-type", "application/json").body(body).send().await.unwrap()
    };
    let stock = format!("/admin/drops/{drop}/stock");
    let doubled = twice(stock, reqwest::Method::POST, r#"{"add": {"40": 100, "40": -100}}"#).await;
    assert_error(doubled, 400, "invalid_request").await;
    let seed = format!("/admin/drops/{drop}");
    let doubled = twice(seed, reqwest::Method::PUT, r#"{"sizes": {"40": {"stock": 1}, "40": {"stock": 9}}}"#).await;
    assert_error(doubled, 400, "invalid_request").await;
    let body: Value = admin_drop(&app, &drop).await.json().await.unwrap();
    assert_eq!(sizes_of(&body).iter().map(|s| s.2).collect::<Vec<_>>(), [2, 2, 0], "nothing changed");
    assert_eq!(audit_actions(&app, &drop).await, ["drop_seed"]);

    let done = post_drop(&app, &drop, "stock", json!({"add": {"40": 10, "41": -2, "42": 1}, "reason": "found"})).await;
    assert_eq!(done.status(), 200);
    let body: Value = done.json().await.unwrap();
    assert_eq!(sizes_of(&body).iter().map(|s| s.2).collect::<Vec<_>>(), [12, 0, 1]);
    // The sold-out size sells again, at once.
    assert_eq!(app.buy(&format!("{drop}.42"), "bob").await.status(), 201);
    for (size, stock) in [("40", 12), ("41", 0), ("42", 2)] {
        assert_eq!(app.sales_row_stock(&format!("{drop}.{size}")).await, stock, "size {size}'s row follows");
    }
    assert_eq!(audit_actions(&app, &drop).await, ["drop_stock", "drop_seed"]);
}

#[tokio::test]
async fn the_drop_page_shows_each_sizes_state_and_stock() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let sizes = json!({"40": {"stock": 3}, "41": {"stock": 1}, "42": {"stock": 2}});
    assert_eq!(put_drop(&app, &drop, json!({"sizes": sizes, "per_buyer": 2})).await.status(), 200);
    assert_eq!(app.buy(&format!("{drop}.41"), "ann").await.status(), 201);
    assert_eq!(post_drop(&app, &drop, "stock", json!({"add": {"42": 1}})).await.status(), 200);
    let browser = crate::chromium::Browser::start().await;
    browser.client.goto(&app.url(&format!("/drop/{drop}"))).await.unwrap();
    let rows = async |b: &crate::chromium::Browser| {
        let script = r##"return [...document.querySelectorAll("#sizes tr")].map((r) => r.innerText.replace(/\s+/g, " ").trim());"##;
        let rows: Vec<String> = serde_json::from_value(b.run(script, vec![]).await).unwrap();
        (rows.len() == 3).then_some(rows)
    };
    let shown = browser.wait_for("three sizes", rows).await;
    assert_eq!(shown, ["40 in stock 3", "41 sold out 0", "42 in stock 3"]);
    assert_eq!(browser.text("summary").await, "6 of 7 left · at most 2 per customer across sizes");
    browser.screenshot("drop-page.png").await;
    assert_eq!(post_drop(&app, &drop, "pause", json!({})).await.status(), 200);
    let paused = browser
        .wait_for("the pause", async |b| {
            rows(b).await.filter(|r| r.iter().filter(|r| r.contains("paused")).count() == 3)
        })
        .await;
    assert_eq!(paused[1], "41 paused 0", "a paused drop shows paused in every size");
    browser.screenshot("drop-page-paused.png").await;
}

#[tokio::test]
async fn the_live_page_shows_a_drop_and_its_switch_pauses_every_size() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let sizes = json!({"40": {"stock": 3}, "41": {"stock": 1}});
    assert_eq!(put_drop(&app, &drop, json!({"sizes": sizes})).await.status(), 200);
    let browser = crate::chromium::Browser::start().await;
    browser.client.goto(&app.url("/admin")).await.unwrap();
    browser.fill("token", ADMIN_TOKEN).await;
    browser.run(r##"document.querySelector("#login button[type=submit]").click();"##, vec![]).await;
    let line = async |b: &crate::chromium::Browser| {
        let script = r#"const d = [...document.querySelectorAll(".drop")].find((d) => d.dataset.dropId === arguments[0]);
            return d ? d.querySelector('[data-field="sizes"]').innerText : null;"#;
        b.run(script, vec![json!(drop)]).await.as_str().map(str::to_owned)
    };
    let shown = browser.wait_for("the drop", line).await;
    assert_eq!(shown, "40: open, 3 left · 41: open, 1 left");
    browser.screenshot("admin-page-drop.png").await;
    // The keyboard's focus on the switch outlives the polls (the row was rebuilt every second).
    let focus = r#"[...document.querySelectorAll(".drop")].find((d) => d.dataset.dropId === arguments[0])
        .querySelector('[data-action="pause"]').focus();"#;
    browser.run(focus, vec![json!(drop)]).await;
    assert_eq!(app.buy(&format!("{drop}.41"), "bea").await.status(), 201);
    browser.wait_for("the sale", async |b| line(b).await.filter(|l| l.contains("41: sold out, 0 left"))).await;
    let focused = r#"const d = document.activeElement;
        return d.dataset.action + " " + (d.closest(".drop") ? d.closest(".drop").dataset.dropId : "none");"#;
    assert_eq!(browser.run(focused, vec![]).await, json!(format!("pause {drop}")), "the focus stays on the switch");
    let click = r#"[...document.querySelectorAll(".drop")].find((d) => d.dataset.dropId === arguments[0])
        .querySelector('[data-action="pause"]').click();"#;
    browser.run(click, vec![json!(drop)]).await;
    browser.wait_for("every size paused", async |b| line(b).await.filter(|l| l.matches("paused").count() == 2)).await;
    assert_error(app.buy(&format!("{drop}.40"), "ann").await, 403, "sale_paused").await;
    assert_eq!(audit_actions(&app, &drop).await, ["drop_pause", "drop_seed"]);
    browser.screenshot("admin-page-drop-paused.png").await;

    // A switch refused (a group of more sales seeded one by one than a drop may have) says why,
    // and the polls after it do not wipe that.
    let group = new_drop_id();
    seed_too_many_sizes(&app, &group).await;
    browser
        .wait_for("the group", async |b| {
            let script =
                r#"return [...document.querySelectorAll(".drop")].some((d) => d.dataset.dropId === arguments[0]);"#;
            b.run(script, vec![json!(group)]).await.as_bool().filter(|listed| *listed)
        })
        .await;
    browser.run(click, vec![json!(group)]).await;
    let refusal =
        browser.wait_for("the refusal", async |b| Some(b.text("action-error").await).filter(|t| !t.is_empty())).await;
    assert!(refusal.starts_with(&format!("pause of drop {group}: 409 not_a_drop")), "{refusal}");
    assert_eq!(app.buy(&format!("{group}.1"), "cy").await.status(), 201, "nothing paused");
    let sizes = format!("{group}.1");
    browser
        .wait_for("a poll after the refusal", async |b| {
            let script = r#"const c = [...document.querySelectorAll(".sale")].find((c) => c.dataset.saleId === arguments[0]);
                return c ? c.querySelector('[data-field="sold"]').innerText : null;"#;
            b.run(script, vec![json!(sizes)]).await.as_str().filter(|sold| *sold == "1").map(|_| ())
        })
        .await;
    assert!(browser.visible("action-error").await, "the refusal stays after the polls");
    assert_eq!(browser.text("action-error").await, refusal);
    browser.screenshot("admin-page-drop-refused.png").await;
}

/// A drop's teardown stopped midway (here its buyers' holdings cannot be drained: the key is
/// damaged) is finished by the retirement's next try, of any of its sizes: the group's meta goes
/// last, and a group with no sale left but its meta has a teardown to finish. The answer stays
/// 410 (the sale itself was retired); on the old code the group's meta was kept for good.
#[tokio::test]
async fn a_drop_teardown_stopped_midway_is_finished_by_the_next_try() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    let sizes = json!({"40": {"stock": 1}, "41": {"stock": 1}});
    assert_eq!(put_drop(&app, &drop, json!({"sizes": sizes, "per_buyer": 2})).await.status(), 200);
    assert_eq!(post_drop(&app, &drop, "end", json!({})).await.status(), 200);
    let retire = async |size: &str| {
        let url = app.url(&format!("/admin/sales/{drop}.{size}"));
        app.client.delete(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap()
    };
    assert_eq!(retire("40").await.status(), 200);
    let prefix = &app.config.key_prefix;
    let (held, meta) = (format!("{prefix}:{{group:{drop}}}:held"), format!("{prefix}:{{group:{drop}}}:meta"));
    let mut redis = app.redis.clone();
    let _: () = redis.set(&held, "not a hash").await.unwrap();
    assert!(!retire("41").await.status().is_success(), "the teardown stopped at the damaged key");
    assert!(redis.exists::<_, bool>(&meta).await.unwrap(), "the group's meta goes last");

    let _: () = redis.del(&held).await.unwrap();
    assert_error(retire("40").await, 410, "sale_retired").await;
    assert!(!redis.exists::<_, bool>(&meta).await.unwrap(), "the group's meta is gone");
    let audit: i64 = sqlx::query_scalar("select count(*) from sale_audit where sale_id = $1 and action = 'retire'")
        .bind(format!("{drop}.40"))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(audit, 1, "size 40 retired once");
}
