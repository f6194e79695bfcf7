//! Reconciliation: differences between the Redis buyers and the Postgres orders of a sale are
//! found (without false alarms on a live sale) and repaired, over HTTP and from the command line.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use redis::AsyncCommands;
use seckill::domain::{Order, SaleId, UserId};
use seckill::orders::queue;
use seckill::orders::worker::StepOutcome;
use seckill::reconcile::ReconcileReport;
use secrecy::ExposeSecret;
use serde_json::json;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, new_sale_id, spawn_app, spawn_app_with};

/// `GET` (check) or `POST` (repair) `/admin/sales/{sale}/reconcile`, asserting 200.
pub(crate) async fn reconcile(app: &TestApp, sale: &str, repair: bool) -> ReconcileReport {
    let url = app.url(&format!("/admin/sales/{sale}/reconcile"));
    let request = if repair { app.client.post(url) } else { app.client.get(url) };
    let response = request.bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 200, "reconcile {sale}");
    response.json().await.unwrap()
}

/// Seeds `stock` and buys for `user-0..n`, returning the confirmed order ids.
async fn sale_with_buyers(app: &TestApp, stock: i64, n: usize) -> (String, BTreeSet<Uuid>) {
    let sale = new_sale_id();
    app.seed_stock(&sale, stock).await;
    let mut ids = BTreeSet::new();
    for i in 0..n {
        ids.insert(buy(app, &sale, &format!("user-{i}")).await);
    }
    (sale, ids)
}

async fn buy(app: &TestApp, sale: &str, user: &str) -> Uuid {
    let response = app.buy(sale, user).await;
    assert_eq!(response.status(), 201, "{user} buys");
    let body: serde_json::Value = response.json().await.unwrap();
    body["order_id"].as_str().unwrap().parse().unwrap()
}

/// Deletes the users' order rows behind the service's back; returns the deleted order ids.
async fn delete_orders(app: &TestApp, sale: &str, users: &[&str]) -> BTreeSet<Uuid> {
    let deleted: Vec<Uuid> =
        sqlx::query_scalar("delete from orders where sale_id = $1 and user_id = any($2) returning order_id")
            .bind(sale)
            .bind(users)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(deleted.len(), users.len());
    deleted.into_iter().collect()
}

fn strings(users: &[&str]) -> Vec<String> {
    users.iter().map(|u| u.to_string()).collect()
}

#[tokio::test]
async fn a_consistent_sale_is_reported_consistent() {
    let app = spawn_app().await;
    let (sale, ids) = sale_with_buyers(&app, 10, 4).await;
    app.assert_invariants(&sale, &ids).await;

    let report = reconcile(&app, &sale, false).await;

    let expected = ReconcileReport {
        sale_id: sale.clone(),
        stock_initial: 10,
        stock_left: 6,
        buyers: 4,
        released: 0,
        releases_owed: 0,
        releases_lost: 0,
        persisted: 4,
        queued: 0,
        units_sold: 4,
        units_returned: 0,
        stock_balanced: true,
        sales_row_stock: Some(10),
        missing_in_postgres: vec![],
        unknown_to_redis: vec![],
        reenqueued: 0,
        sales_row_restored: false,
        sale_restored: false,
        buyers_restored: 0,
        releases_restored: 0,
        overdrawn: 0,
        units_released: 0,
        consistent: true,
    };
    assert_eq!(report, expected);
    assert!(report.resolved());
}

#[tokio::test]
async fn orders_deleted_behind_the_services_back_are_reported_and_re_enqueued() {
    let app = spawn_app().await;
    let (sale, ids) = sale_with_buyers(&app, 10, 8).await;
    app.wait_for_drain(&sale).await;
    let deleted = delete_orders(&app, &sale, &["user-6", "user-1", "user-4"]).await;

    let report = reconcile(&app, &sale, false).await;
    assert_eq!(report.missing_in_postgres, strings(&["user-1", "user-4", "user-6"]), "{report:?}");
    assert!(report.unknown_to_redis.is_empty(), "{report:?}");
    assert_eq!((report.buyers, report.persisted, report.queued), (8, 5, 0));
    assert!(report.stock_balanced && !report.consistent && !report.resolved(), "{report:?}");

    let repaired = reconcile(&app, &sale, true).await;
    assert_eq!(repaired.reenqueued, 3, "{repaired:?}");
    assert_eq!(repaired.missing_in_postgres, report.missing_in_postgres);
    assert!(repaired.resolved(), "{repaired:?}");

    app.assert_invariants(&sale, &ids).await; // buyers == Postgres users, one order each
    assert!(ids.is_superset(&deleted));
    assert_eq!(app.order_ids(&sale).await, ids, "re-enqueued orders keep the ids their buyers were told (receipts)");
    let after = reconcile(&app, &sale, false).await;
    assert!(after.consistent && after.missing_in_postgres.is_empty(), "{after:?}");
    assert_eq!(reconcile(&app, &sale, true).await.reenqueued, 0, "nothing left to re-enqueue");
}

#[tokio::test]
async fn a_re_enqueued_order_of_several_units_keeps_its_quantity_in_its_receipt() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 10, "per_buyer": 3})).await.status(), 200);
    let body = json!({"sale_id": sale, "user_id": "bulk", "quantity": 3});
    let bought = app.client.post(app.url("/buy")).json(&body).send().await.unwrap();
    assert_eq!(bought.status(), 201, "{}", bought.text().await.unwrap());
    app.wait_for_drain(&sale).await;
    delete_orders(&app, &sale, &["bulk"]).await;
    assert_eq!(reconcile(&app, &sale, true).await.reenqueued, 1);
    app.wait_for_drain(&sale).await;
    let stored: i32 = sqlx::query_scalar("select quantity from orders where sale_id = $1 and user_id = 'bulk'")
        .bind(&sale)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 3, "stored with its units");
    // The receipt the repair wrote still says three units: a repeat hears them, and a later
    // repair would queue them.
    let again = app.client.post(app.url("/buy")).json(&body).send().await.unwrap();
    assert_eq!(again.status(), 409);
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!((&again["error"], &again["quantity"]), (&json!("already_purchased"), &json!(3)), "{again}");
}

#[tokio::test]
async fn queued_orders_are_not_reported_missing_and_a_repeated_repair_enqueues_once() {
    let app = spawn_app_with(|_| {}, false).await;
    let (sale, _) = sale_with_buyers(&app, 10, 4).await;
    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    while worker.step().await.unwrap() != StepOutcome::Idle {}
    for user in ["user-4", "user-5", "user-6"] {
        buy(&app, &sale, user).await; // queued: no worker runs
    }
    delete_orders(&app, &sale, &["user-2"]).await;

    let report = reconcile(&app, &sale, false).await;
    assert_eq!((report.buyers, report.persisted, report.queued), (7, 3, 3));
    assert_eq!(report.missing_in_postgres, strings(&["user-2"]), "queued orders are not missing: {report:?}");

    assert_eq!(reconcile(&app, &sale, true).await.reenqueued, 1);
    let again = reconcile(&app, &sale, true).await;
    assert_eq!((again.reenqueued, again.queued), (0, 4), "the re-enqueued order is queued, not missing: {again:?}");
    assert!(again.consistent, "{again:?}");
}

#[tokio::test]
async fn a_postgres_order_of_a_user_redis_does_not_know_is_reported_and_restored_as_a_buyer() {
    let app = spawn_app().await;
    let (sale, ids) = sale_with_buyers(&app, 10, 2).await;
    app.assert_invariants(&sale, &ids).await;
    insert_ghost_order(&app, &sale).await;

    let report = reconcile(&app, &sale, false).await;
    assert_eq!(report.unknown_to_redis, strings(&["ghost"]), "{report:?}");
    assert!(report.missing_in_postgres.is_empty(), "{report:?}");
    assert_eq!((report.buyers, report.persisted), (2, 3));
    assert!(!report.consistent);

    let repaired = reconcile(&app, &sale, true).await;
    assert_eq!((repaired.reenqueued, repaired.unknown_to_redis.len(), repaired.buyers_restored), (0, 1, 1));
    assert!(repaired.resolved(), "{repaired:?}");
    assert!(app.order_users(&sale).await.iter().any(|(u, _)| u == "ghost"), "nothing is deleted");
    let after = reconcile(&app, &sale, false).await;
    assert_eq!((after.buyers, after.stock_left), (3, 7), "ghost is a buyer, its item taken: {after:?}");
    assert!(after.consistent, "{after:?}");
    assert_error(app.buy(&sale, "ghost").await, 409, "already_purchased").await;
}

#[tokio::test]
async fn a_missing_sales_row_is_reported_and_restored_but_an_existing_one_is_never_overwritten() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    let schedule = json!({"stock": 5, "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2999-01-01T00:00:00Z"});
    assert_eq!(app.seed(&sale, schedule).await.status(), 200);
    let ids = BTreeSet::from([buy(&app, &sale, "alice").await]);
    app.assert_invariants(&sale, &ids).await;
    sqlx::query("delete from sales where sale_id = $1").bind(&sale).execute(&app.pool).await.unwrap();

    let report = reconcile(&app, &sale, false).await;
    assert_eq!(report.sales_row_stock, None);
    assert!(report.missing_in_postgres.is_empty() && report.unknown_to_redis.is_empty(), "{report:?}");
    assert!(!report.consistent);

    let repaired = reconcile(&app, &sale, true).await;
    assert!(repaired.sales_row_restored && repaired.resolved(), "{repaired:?}");
    let row: (i64, OffsetDateTime, OffsetDateTime) =
        sqlx::query_as("select stock_initial, starts_at, ends_at from sales where sale_id = $1")
            .bind(&sale)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let at = |s: &str| OffsetDateTime::parse(s, &Rfc3339).unwrap();
    assert_eq!(row, (5, at("2020-01-01T00:00:00Z"), at("2999-01-01T00:00:00Z")), "stock and schedule from Redis");
    let after = reconcile(&app, &sale, false).await;
    assert!(after.consistent && after.sales_row_stock == Some(5), "{after:?}");

    sqlx::query("update sales set stock_initial = 99 where sale_id = $1").bind(&sale).execute(&app.pool).await.unwrap();
    let differs = reconcile(&app, &sale, true).await;
    assert_eq!((differs.sales_row_stock, differs.sales_row_restored), (Some(99), false));
    assert!(!differs.consistent && !differs.resolved(), "{differs:?}");
    assert_eq!(app.sales_row_stock(&sale).await, 99, "an existing row is not overwritten");
}

#[tokio::test]
async fn big_buyer_sets_and_queues_are_read_page_by_page() {
    // More buyers and queued orders than one SSCAN or XRANGE page holds.
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 5000).await;
    let sale_id = SaleId::parse(&sale).unwrap();
    let users: Vec<String> = (0..2500).map(|i| format!("user-{i}")).collect();
    let orders: Vec<Order> = users
        .iter()
        .map(|u| Order {
            order_id: Uuid::now_v7(),
            sale_id: sale_id.clone(),
            user_id: UserId::parse(u).unwrap(),
            created_at_ms: 1,
            pay_by_ms: None,
            quantity: 1,
        })
        .collect();
    queue::enqueue(app.store.keyspace(), &orders).await.unwrap();
    let buyers_key = app.store.keyspace().sale_keys(&sale_id).buyers;
    let _: i64 = app.redis.clone().sadd(&buyers_key, &users).await.unwrap();
    let _: i64 = app.redis.clone().sadd(&buyers_key, "lost").await.unwrap();

    let report = reconcile(&app, &sale, false).await;

    assert_eq!((report.buyers, report.queued), (2501, 2500));
    assert_eq!(report.missing_in_postgres, strings(&["lost"]), "every queued user is seen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checks_during_a_busy_sale_report_no_false_differences() {
    // Buys and the worker's commits run while the checks read. A wrong read order (the stream
    // after Postgres, or Postgres against the first buyer scan) reports differences here.
    let app = spawn_app().await;
    let sale = new_sale_id();
    let buyers = 2000;
    app.seed_stock(&sale, buyers).await;
    let first = buy(&app, &sale, "user-0").await;
    app.wait_for_drain(&sale).await; // the worker now reads this sale's stream
    let buying = futures::stream::iter(1..buyers)
        .map(|i| {
            let (app, sale) = (&app, &sale);
            async move { buy(app, sale, &format!("user-{i}")).await }
        })
        .buffer_unordered(16)
        .collect::<BTreeSet<Uuid>>();
    let checking = async {
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut reports = Vec::new();
        loop {
            assert!(tokio::time::Instant::now() < until, "the sale did not sell out and drain");
            let report = reconcile(&app, &sale, false).await;
            let done = report.buyers == buyers && report.queued == 0;
            reports.push(report);
            if done {
                return reports;
            }
        }
    };
    let (mut ids, reports) = tokio::join!(buying, checking);
    ids.insert(first);

    let mid_sale = reports.iter().filter(|r| r.buyers < buyers && r.persisted > 1).count();
    assert!(mid_sale >= 3, "too few checks while orders were flowing: {mid_sale}");
    for report in &reports {
        assert!(report.consistent, "false difference during the sale: {report:?}");
    }
    app.assert_invariants(&sale, &ids).await;
}

#[tokio::test]
async fn reconcile_routes_need_the_token_a_valid_id_and_a_known_sale() {
    let app = spawn_app().await;
    let path = format!("/admin/sales/{}/reconcile", new_sale_id());
    assert_error(app.client.get(app.url(&path)).send().await.unwrap(), 401, "unauthorized").await;
    assert_error(app.client.post(app.url(&path)).send().await.unwrap(), 401, "unauthorized").await;
    let get = app.client.get(app.url(&path)).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_error(get, 404, "unknown_sale").await;
    let post = app.client.post(app.url(&path)).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_error(post, 404, "unknown_sale").await;
    let bad = app.client.get(app.url("/admin/sales/a%20b/reconcile")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_error(bad, 400, "invalid_request").await;
    let put = app.client.put(app.url(&path)).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_error(put, 405, "method_not_allowed").await;
}

#[tokio::test]
async fn reconcile_answers_503_when_redis_is_down() {
    let app = spawn_app_with(|c| c.redis_url = "redis://127.0.0.1:1".to_owned().into(), false).await;
    let path = format!("/admin/sales/{}/reconcile", new_sale_id());
    let response = app.client.get(app.url(&path)).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_error(response, 503, "unavailable").await;
}

/// Runs the real `seckill reconcile` binary against the app's Redis, Postgres and key prefix.
async fn run_cli(app: &TestApp, args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill"));
    command
        .arg("reconcile")
        .args(args)
        .env("SECKILL_REDIS_URL", app.config.redis_url.expose_secret())
        .env("SECKILL_DATABASE_URL", app.config.database_url.expose_secret())
        .env("SECKILL_KEY_PREFIX", &app.config.key_prefix);
    let output = crate::common::output_within(command, std::time::Duration::from_secs(120)).await;
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (output.status.code(), text(output.stdout), text(output.stderr))
}

#[tokio::test]
async fn the_cli_reports_repairs_and_exits_with_what_is_left() {
    let app = spawn_app().await;
    let (sale, _) = sale_with_buyers(&app, 10, 5).await;
    app.wait_for_drain(&sale).await;
    delete_orders(&app, &sale, &["user-3", "user-0"]).await;

    let (code, stdout, stderr) = run_cli(&app, &[&sale]).await;
    assert_eq!(code, Some(1), "differences remain: {stderr}");
    let report: ReconcileReport = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report.missing_in_postgres, strings(&["user-0", "user-3"]));
    assert!(!report.consistent);

    let (code, stdout, stderr) = run_cli(&app, &[&sale, "--repair"]).await;
    assert_eq!(code, Some(0), "the repair fixed everything: {stderr}");
    let repaired: ReconcileReport = serde_json::from_str(&stdout).unwrap();
    assert_eq!(repaired.reenqueued, 2);
    app.wait_for_drain(&sale).await;
    assert_eq!(app.order_users(&sale).await.len(), 5);
    assert_eq!(run_cli(&app, &[&sale]).await.0, Some(0), "consistent again");

    insert_ghost_order(&app, &sale).await;
    assert_eq!(run_cli(&app, &[&sale]).await.0, Some(1), "unknown_to_redis is a difference");
    assert_eq!(run_cli(&app, &[&sale, "--repair"]).await.0, Some(0), "the repair restores the buyer");

    let (code, stdout, stderr) = run_cli(&app, &[&new_sale_id()]).await;
    assert_eq!((code, stdout.as_str()), (Some(2), ""));
    assert!(stderr.contains("unknown sale"), "{stderr}");
    let (code, _, stderr) = run_cli(&app, &["not a sale"]).await;
    assert_eq!(code, Some(2));
    assert!(stderr.contains("sale_id must be"), "{stderr}");
}

/// An order for user `ghost`, written to Postgres behind the service's back.
async fn insert_ghost_order(app: &TestApp, sale: &str) {
    sqlx::query("insert into orders (order_id, sale_id, user_id, created_at) values ($1, $2, 'ghost', now())")
        .bind(Uuid::now_v7())
        .bind(sale)
        .execute(&app.pool)
        .await
        .unwrap();
}

/// A repair refuses a sale whose row is marked retired, retired or being retired (the mark comes
/// first), whatever Redis still holds of it: run beside the retirement, it would write back what
/// the retirement removes. Here a drop's size between the retirement's mark and the removal of
/// its keys (unregistered, its meta still there): the repair answers 410 `sale_retired` and the
/// CLI exits 4, and neither registers the size again (before, the repair ran: 200).
#[tokio::test]
async fn a_repair_refuses_a_sale_marked_retired_and_writes_nothing_back() {
    use seckill::redis::keys::{group_sales_key, sales_registry_key};
    let app = spawn_app().await;
    let drop = crate::common::drops::seed_drop_sizes(&app, &["40", "41"], 5, 1).await;
    let size = format!("{drop}.40");
    let prefix = &app.config.key_prefix;
    let mut redis = app.redis.clone();
    sqlx::query("update sales set retired_at = now() where sale_id = $1").bind(&size).execute(&app.pool).await.unwrap();
    let _: () = redis.srem(sales_registry_key(prefix), &size).await.unwrap();
    let _: () = redis.srem(group_sales_key(prefix, &drop), &size).await.unwrap();

    let response = app.client.post(app.url(&format!("/admin/sales/{size}/reconcile"))).bearer_auth(ADMIN_TOKEN);
    assert_error(response.send().await.unwrap(), 410, "sale_retired").await;
    let (code, stdout, stderr) = run_cli(&app, &[size.as_str(), "--repair"]).await;
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(stderr.contains("retired"), "{stderr}");
    let registered: bool = redis.sismember(sales_registry_key(prefix), &size).await.unwrap();
    let in_drop: bool = redis.sismember(group_sales_key(prefix, &drop), &size).await.unwrap();
    assert_eq!((registered, in_drop), (false, false), "nothing of the size written back");
}

/// A configuration the service refuses (here an admin token under 32 bytes) is its own exit status
/// for the commands scripts read statuses of (it exited 1, "differences remain" or "refused"), and
/// nothing runs.
#[tokio::test]
async fn the_cli_exits_5_on_a_refused_configuration() {
    let app = spawn_app().await;
    for command in ["reconcile", "retire"] {
        let mut cli = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill"));
        cli.args([command, &new_sale_id()])
            .env("SECKILL_REDIS_URL", app.config.redis_url.expose_secret())
            .env("SECKILL_DATABASE_URL", app.config.database_url.expose_secret())
            .env("SECKILL_KEY_PREFIX", &app.config.key_prefix)
            .env("SECKILL_ADMIN_TOKEN", "too-short");
        let output = crate::common::output_within(cli, std::time::Duration::from_secs(120)).await;
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(5), "{command}: {stderr}");
        assert!(stderr.contains("configuration") && !stderr.contains("too-short"), "{stderr}");
        assert!(output.stdout.is_empty(), "nothing ran");
    }
}
