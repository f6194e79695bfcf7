//! Webhook endpoints as data (issue 51): the admin routes that list, register, remove and
//! re-enable them (the admin token, 4xx JSON on bad input), events written for the endpoints of
//! the table whatever the instance's settings, and an endpoint disabled after failing for
//! `SECKILL_WEBHOOK_DISABLE_AFTER`, then enabled again.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::common::receiver::{Mode, Receiver};
use crate::common::{ADMIN_TOKEN, assert_error};
use crate::helpers::{TestApp, new_sale_id, spawn_app_with, spawn_instance_of};
use crate::webhooks::webhooks_to;

/// An admin request with the token, and its status and JSON body.
async fn admin(app: &TestApp, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn register(app: &TestApp, url: &str) -> (u16, Value) {
    admin(app, Method::POST, "/admin/webhooks", Some(json!({ "url": url }))).await
}

/// Seeds a sale of `stock` units and buys `users` orders of it (confirmed at once).
async fn sale_with_orders(app: &TestApp, stock: i64, users: &[&str]) -> String {
    let sale = new_sale_id();
    app.seed_stock(&sale, stock).await;
    for user in users {
        assert_eq!(app.buy(&sale, user).await.status(), 201, "{user}");
    }
    sale
}

/// Waits until Postgres holds `count` orders of the sale.
async fn stored(app: &TestApp, sale: &str, count: i64) {
    let until = Instant::now() + Duration::from_secs(20);
    while app.status(sale).await.persisted != Some(count) {
        assert!(Instant::now() < until, "the orders of {sale} were not stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `check` holds for the endpoint listing, within 20 s; returns the listing.
async fn listing_until(app: &TestApp, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, listed) = admin(app, Method::GET, "/admin/webhooks", None).await;
        assert_eq!(status, 200, "{listed}");
        if check(&listed) {
            return listed;
        }
        assert!(Instant::now() < until, "{what}: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each event's `webhook-id` the receiver accepted.
fn accepted(receiver: &Receiver) -> Vec<String> {
    receiver.attempts().into_iter().filter(|a| a.answered == 200).map(|a| a.id).collect()
}

#[tokio::test]
async fn the_endpoint_routes_need_the_admin_token_and_refuse_bad_input_with_json() {
    let app = spawn_app_with(|_| {}, true).await;
    for (method, path) in [
        (Method::GET, "/admin/webhooks"),
        (Method::POST, "/admin/webhooks"),
        (Method::DELETE, "/admin/webhooks/1"),
        (Method::POST, "/admin/webhooks/1/enable"),
    ] {
        let bare = app.client.request(method.clone(), app.url(path)).json(&json!({"url": "http://x.test/"}));
        assert_error(bare.send().await.unwrap(), 401, "unauthorized").await;
        let wrong = app.client.request(method, app.url(path)).bearer_auth("not-the-admin-token");
        assert_error(wrong.json(&json!({"url": "http://x.test/"})).send().await.unwrap(), 401, "unauthorized").await;
    }
    for bad in [
        json!({"url": "ftp://shop.test/hook"}),
        json!({"url": "javascript:alert(1)"}),
        json!({"url": "not a url"}),
        json!({"url": format!("https://shop.test/{}", "a".repeat(3000))}),
        json!({"url": "http://shop.test/", "secret": "x"}),
        json!({"url": 7}),
        json!({}),
        json!(["http://shop.test/"]),
    ] {
        let (status, body) = admin(&app, Method::POST, "/admin/webhooks", Some(bad.clone())).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("invalid_request")), "{bad}: {body}");
    }
    for path in ["/admin/webhooks/abc", "/admin/webhooks/1.5"] {
        let (status, body) = admin(&app, Method::DELETE, path, None).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("invalid_request")), "{path}: {body}");
    }
    let (status, body) = admin(&app, Method::DELETE, "/admin/webhooks/999999", None).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("unknown_endpoint")), "{body}");
    let (status, body) = admin(&app, Method::POST, "/admin/webhooks/999999/enable", None).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("unknown_endpoint")), "{body}");
    let (status, listed) = admin(&app, Method::GET, "/admin/webhooks", None).await;
    assert_eq!((status, listed), (200, json!({"endpoints": []})), "nothing was registered");
}

/// An instance without `SECKILL_WEBHOOK_URL` and without events written: an endpoint registered
/// through the route gets the events written from then on (from the table, not the settings),
/// sent by this instance (it has the secret); a second registration changes nothing; removing an
/// endpoint drops its open deliveries; at most 16.
#[tokio::test]
async fn endpoints_registered_by_the_route_get_every_event_written_after() {
    let receiver = Receiver::start(Mode::Accept).await;
    let down = Receiver::start(Mode::Down).await;
    let app = spawn_app_with(
        |c| {
            // Retried every 200 ms for 40 s: the down endpoint's delivery stays open meanwhile.
            webhooks_to(c, &receiver.url, 200);
            c.webhooks.webhook_url.clear();
        },
        true,
    )
    .await;
    let before = sale_with_orders(&app, 5, &["early"]).await;
    stored(&app, &before, 1).await;
    let events: i64 = sqlx::query_scalar("select count(*) from webhook_events").fetch_one(&app.pool).await.unwrap();
    assert_eq!(events, 0, "no endpoint registered: no event written");

    let (status, registered) = register(&app, &receiver.url).await;
    assert_eq!((status, registered["state"].as_str()), (201, Some("enabled")), "{registered}");
    assert_eq!(registered["url"].as_str(), Some(receiver.url.as_str()));
    let (status, again) = register(&app, &receiver.url).await;
    assert_eq!((status, &again["id"]), (200, &registered["id"]), "registered once: {again}");

    let sale = sale_with_orders(&app, 5, &["after"]).await;
    let until = Instant::now() + Duration::from_secs(20);
    while accepted(&receiver).is_empty() {
        assert!(Instant::now() < until, "the event of the order bought after the registration never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered = receiver.attempts().into_iter().find(|a| a.answered == 200).unwrap();
    assert!(delivered.body.contains(&sale) && !delivered.body.contains(&before), "{}", delivered.body);

    // A second endpoint that is down: its deliveries stay open until it is removed.
    let (status, second) = register(&app, &down.url).await;
    assert_eq!(status, 201, "{second}");
    sale_with_orders(&app, 5, &["to-both"]).await;
    let listed = listing_until(&app, "a delivery open to the down endpoint", |l| l["endpoints"][1]["open"] == 1).await;
    assert_eq!(listed["endpoints"].as_array().unwrap().len(), 2, "{listed}");
    let id = second["id"].as_i64().unwrap();
    let (status, removed) = admin(&app, Method::DELETE, &format!("/admin/webhooks/{id}"), None).await;
    assert_eq!((status, &removed["url"], &removed["dropped"]), (200, &json!(down.url), &json!(1)), "{removed}");
    let (status, listed) = admin(&app, Method::GET, "/admin/webhooks", None).await;
    assert_eq!((status, listed["endpoints"].as_array().map(Vec::len)), (200, Some(1)), "{listed}");
    let (status, gone) = admin(&app, Method::DELETE, &format!("/admin/webhooks/{id}"), None).await;
    assert_eq!((status, gone["error"].as_str()), (404, Some("unknown_endpoint")));

    for i in 1..16 {
        assert_eq!(register(&app, &format!("http://127.0.0.1:9/{i}")).await.0, 201, "endpoint {i}");
    }
    let (status, full) = register(&app, "http://127.0.0.1:9/17").await;
    assert_eq!((status, full["error"].as_str()), (409, Some("too_many_endpoints")), "{full}");
}

/// An app (with its worker) whose webhooks go to `receiver`, retried every 200 ms for 40 s (still
/// open when the endpoint is disabled, on a slow host too), the endpoint disabled after failing
/// for a second.
async fn disabled_after_a_second(receiver: &Receiver) -> TestApp {
    spawn_app_with(
        |c| {
            webhooks_to(c, &receiver.url, 200);
            c.webhooks.webhook_disable_after = Duration::from_secs(1);
        },
        true,
    )
    .await
}

/// A receiver's refusal whose body holds a NUL byte (which Postgres text refuses) is recorded
/// all the same, and counts toward disabling the endpoint: on the old code the attempt's record
/// failed, so the endpoint was never disabled and its deliveries were retried for ever.
#[tokio::test]
async fn a_refusal_whose_body_holds_a_nul_byte_is_recorded_and_disables_the_endpoint() {
    let receiver = Receiver::start(Mode::RefuseWithNul).await;
    let app = disabled_after_a_second(&receiver).await;
    sale_with_orders(&app, 10, &["a", "b"]).await;
    let listed =
        listing_until(&app, "the endpoint was never disabled", |l| l["endpoints"][0]["state"] == "disabled").await;
    assert!(receiver.attempts().iter().all(|a| a.answered == 500), "{listed}");
    // The deliveries attempted (one its disabling closed unattempted reads "not attempted").
    let errors: Vec<Option<String>> =
        sqlx::query_scalar("select last_error from webhook_deliveries where endpoint = $1 and attempts > 0")
            .bind(&receiver.url)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert!(!errors.is_empty(), "the endpoint had deliveries");
    for error in &errors {
        assert!(error.as_deref().is_some_and(|e| e.contains("HTTP 500: x\u{FFFD}y")), "{errors:?}");
    }
}

/// An endpoint that refuses every attempt for `SECKILL_WEBHOOK_DISABLE_AFTER` (1 s here) is
/// disabled: its open deliveries fail, the listing, the live page's overview and the metrics say
/// so, an event written meanwhile gets no delivery to it, a restart with the same
/// `SECKILL_WEBHOOK_URL` leaves it disabled; re-enabled, it gets the deliveries its disabling
/// failed and the events written from then on.
#[tokio::test]
async fn an_endpoint_failing_for_long_is_disabled_then_enabled_again() {
    let receiver = Receiver::start(Mode::Down).await;
    let app = disabled_after_a_second(&receiver).await;
    let sale = sale_with_orders(&app, 10, &["a", "b", "c"]).await;
    let listed =
        listing_until(&app, "the endpoint was never disabled", |l| l["endpoints"][0]["state"] == "disabled").await;
    let endpoint = &listed["endpoints"][0];
    let reason = endpoint["disabled_reason"].as_str().unwrap();
    assert!(reason.starts_with("no attempt accepted since ") && reason.contains("1s or more"), "{reason}");
    assert!(endpoint["failing_since"].is_string() && endpoint["disabled_at"].is_string(), "{endpoint}");
    // Every delivery it had (one per order stored before the disabling: all three, unless the
    // worker stalled for a second) failed at the disabling; none is open.
    let users_before: Vec<String> = sqlx::query_scalar(
        "select o.user_id from webhook_deliveries d join webhook_events e on e.id = d.event_id
         join orders o on o.order_id = e.order_id where d.endpoint = $1 order by o.user_id",
    )
    .bind(&receiver.url)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(!users_before.is_empty(), "the endpoint had deliveries");
    let had = users_before.len() as i64;
    assert_eq!((endpoint["open"].as_i64(), endpoint["failed"].as_i64()), (Some(0), Some(had)), "{endpoint}");
    let id = endpoint["id"].as_i64().unwrap();

    let (_, overview) = admin(&app, Method::GET, "/admin/sales", None).await;
    let shown = &overview["webhooks"]["endpoints"][0];
    assert_eq!((shown["state"].as_str(), shown["disabled_reason"].as_str()), (Some("disabled"), Some(reason)));
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = reqwest::get(app.url("/metrics")).await.unwrap().text().await.unwrap();
        if metrics.contains("seckill_webhook_endpoints{state=\"disabled\"} 1")
            && metrics.contains("seckill_webhook_endpoints{state=\"enabled\"} 0")
        {
            assert!(metrics.contains("seckill_webhook_endpoints_disabled_total 1"), "{metrics}");
            break;
        }
        assert!(Instant::now() < until, "{metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Written while disabled: the event is kept (listed), with no delivery to it.
    assert_eq!(app.buy(&sale, "while-disabled").await.status(), 201);
    stored(&app, &sale, 4).await;
    // Listed once every transaction older than it has ended, on the whole Postgres server (other
    // tests' included): asked until it shows.
    let until = Instant::now() + Duration::from_secs(20);
    let meanwhile = loop {
        let (_, events) = admin(&app, Method::GET, "/admin/events?limit=500", None).await;
        let listed: Vec<Value> = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["body"]["data"]["user_id"] == "while-disabled")
            .cloned()
            .collect();
        if !listed.is_empty() {
            break listed;
        }
        assert!(Instant::now() < until, "the event is not listed: {events}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(meanwhile.len(), 1, "{meanwhile:?}");
    assert_eq!(meanwhile[0]["deliveries"], json!([]), "no delivery to a disabled endpoint");

    // A restart with the same SECKILL_WEBHOOK_URL registers nothing new and enables nothing.
    let restarted = spawn_instance_of(&app).await;
    let (_, listed) = admin(&restarted, Method::GET, "/admin/webhooks", None).await;
    assert_eq!(
        (listed["endpoints"][0]["state"].as_str(), listed["endpoints"].as_array().map(Vec::len)),
        (Some("disabled"), Some(1))
    );

    receiver.set_mode(Mode::Accept);
    let (status, enabled) = admin(&app, Method::POST, &format!("/admin/webhooks/{id}/enable"), None).await;
    assert_eq!((status, enabled["reopened"].as_i64()), (200, Some(had)), "{enabled}");
    assert_eq!(enabled["endpoint"]["state"], "enabled");
    assert!(enabled["endpoint"]["failing_since"].is_null() && enabled["endpoint"]["disabled_reason"].is_null());
    assert_eq!(app.buy(&sale, "after").await.status(), 201);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let mut users: Vec<String> = receiver
            .attempts()
            .into_iter()
            .filter(|a| a.answered == 200)
            .map(|a| serde_json::from_str::<Value>(&a.body).unwrap()["data"]["user_id"].as_str().unwrap().to_owned())
            .collect();
        users.sort_unstable();
        users.dedup();
        let mut expected = users_before.clone();
        expected.push("after".to_owned());
        expected.sort_unstable();
        if users.len() >= expected.len() {
            assert_eq!(users, expected, "the reopened ones and the one after; not the one written while disabled");
            break;
        }
        assert!(Instant::now() < until, "accepted so far: {users:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = listing_until(&app, "every delivery settled", |l| l["endpoints"][0]["open"] == 0).await;
    assert_eq!(listed["endpoints"][0]["failed"], 0, "{listed}");
    let (status, again) = admin(&app, Method::POST, &format!("/admin/webhooks/{id}/enable"), None).await;
    assert_eq!((status, again["reopened"].as_u64()), (200, Some(0)), "enabling an enabled endpoint changes nothing");
}

/// The migration that made endpoints data registers the URL of every delivery still open (so
/// those go on being sent) and no other; and the previous version's writer, which its instances
/// still call during a rolling upgrade with their own list, writes to the registered endpoints.
#[tokio::test]
async fn the_migration_keeps_open_deliveries_going_and_the_previous_writer_working() {
    const ENDPOINTS_AS_DATA: i64 = 20261201120000;
    let pool = sqlx::PgPool::connect(&crate::common::create_database().await).await.unwrap();
    let migrate = async |keep: &dyn Fn(i64) -> bool| {
        for migration in seckill::db::MIGRATOR.iter().filter(|m| keep(m.version)) {
            sqlx::raw_sql(&migration.sql).execute(&pool).await.unwrap();
        }
    };
    migrate(&|version| version < ENDPOINTS_AS_DATA).await;
    let emit = "select webhook_emit($1, 'order.created', 's', gen_random_uuid(), '{}'::jsonb)";
    let event: i64 = sqlx::query_scalar(emit)
        .bind(["http://open.test/hook", "http://settled.test/hook"])
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query("update webhook_deliveries set delivered_at = now() where endpoint = 'http://settled.test/hook'")
        .execute(&pool)
        .await
        .unwrap();
    migrate(&|version| version >= ENDPOINTS_AS_DATA).await;

    let registered: Vec<String> =
        sqlx::query_scalar("select url from webhook_endpoints order by id").fetch_all(&pool).await.unwrap();
    assert_eq!(registered, ["http://open.test/hook"], "the URL with an open delivery, and only it");
    let open: Vec<String> = sqlx::query_scalar(
        "select endpoint from webhook_deliveries where event_id = $1 and delivered_at is null and failed_at is null",
    )
    .bind(event)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(open, ["http://open.test/hook"], "the open delivery is untouched");
    let later: i64 = sqlx::query_scalar(emit).bind(["http://other.test/hook"]).fetch_one(&pool).await.unwrap();
    let to: Vec<String> = sqlx::query_scalar("select endpoint from webhook_deliveries where event_id = $1")
        .bind(later)
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(to, ["http://open.test/hook"], "the table decides, not the previous version's list");
}

/// A run of failures is broken by a silence: an endpoint whose last failed round was longer ago
/// than the retry schedule's longest pause and an hour had nothing attempted meanwhile (every
/// attempt of its events spent), so its next failure starts a new run rather than disabling it at
/// once; a run whose failures came close together is disabled once it has lasted
/// `SECKILL_WEBHOOK_DISABLE_AFTER`. On the code before, the first case disabled the endpoint.
#[tokio::test]
async fn a_silence_ends_a_run_of_failures_and_only_a_run_that_lasted_disables() {
    use seckill::webhooks::endpoints;
    let app = spawn_app_with(|_| {}, false).await; // no dispatcher: nothing else touches the row
    let url = "http://127.0.0.1:9/silence";
    assert_eq!(register(&app, url).await.0, 201);
    let (three_days, silence) = (Duration::from_secs(3 * 86_400), Duration::from_secs(11 * 3_600));
    let failing_for = async |days: i32, last_failed_minutes_ago: i32| {
        sqlx::query(
            "update webhook_endpoints set failing_since = now() - make_interval(days => $2),
                 last_failed_at = now() - make_interval(mins => $3) where url = $1",
        )
        .bind(url)
        .bind(days)
        .bind(last_failed_minutes_ago)
        .execute(&app.pool)
        .await
        .unwrap();
    };
    let state = async || -> (bool, bool) {
        sqlx::query_as(
            "select disabled_at is not null, failing_since > now() - interval '1 minute'
             from webhook_endpoints where url = $1",
        )
        .bind(url)
        .fetch_one(&app.pool)
        .await
        .unwrap()
    };

    // Failing since 30 days, the last failure 29 days ago: a new run, from now.
    failing_for(30, 29 * 24 * 60).await;
    let gone = endpoints::failed(&app.pool, url, (Some(three_days), silence), "HTTP 503").await.unwrap();
    assert_eq!((gone, state().await), (None, (false, true)), "a new run starts; the endpoint stays enabled");
    // Failing for 4 days, the last failure an hour ago: the run lasted 3 days, disabled.
    failing_for(4, 60).await;
    let gone = endpoints::failed(&app.pool, url, (Some(three_days), silence), "HTTP 503").await.unwrap();
    assert!(gone.is_some(), "a run of 4 days disables the endpoint");
    assert_eq!(state().await, (true, false), "disabled, its run's start kept");
}

/// An endpoint's URL may carry the receiver's credentials (a user and password, a token in the
/// query): every answer that names it (the listing, a registration's, the live page's overview,
/// the events' deliveries), which a viewer reads too, shows it without them.
#[tokio::test]
async fn no_answer_shows_the_credentials_an_endpoints_url_carries() {
    let app = spawn_app_with(|_| {}, true).await; // the worker writes the events; nobody sends them
    let url = "http://hook:s3cret@127.0.0.1:9/in?token=abc#x";
    let (status, registered) = register(&app, url).await;
    assert_eq!(status, 201, "{registered}");
    let sale = sale_with_orders(&app, 5, &["a"]).await;
    stored(&app, &sale, 1).await;
    let until = Instant::now() + Duration::from_secs(20);
    let events = loop {
        let (_, events) = admin(&app, Method::GET, "/admin/events?limit=500", None).await;
        let ours = events["events"].as_array().unwrap().iter().any(|e| e["sale_id"] == sale.as_str());
        if ours {
            break events;
        }
        assert!(Instant::now() < until, "the event was never listed: {events}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (_, listed) = admin(&app, Method::GET, "/admin/webhooks", None).await;
    let (_, overview) = admin(&app, Method::GET, "/admin/sales", None).await;
    assert_eq!(listed["endpoints"][0]["url"], "http://127.0.0.1:9/in", "{listed}");
    let delivered_to: Vec<&Value> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["sale_id"] == sale.as_str())
        .flat_map(|e| e["deliveries"].as_array().unwrap())
        .map(|d| &d["endpoint"])
        .collect();
    assert_eq!(delivered_to, [&json!("http://127.0.0.1:9/in")], "{events}");
    for (what, answer) in
        [("registration", &registered), ("listing", &listed), ("overview", &overview), ("events", &events)]
    {
        let text = answer.to_string();
        assert!(!text.contains("s3cret") && !text.contains("token=abc"), "{what}: {text}");
    }
}
