//! Retiring a sale (issue 16, "nothing shrinks"): once it has ended or sold out, drained and
//! reconciles, `DELETE /admin/sales/{id}` removes every Redis key and registration of it, and
//! Postgres keeps its orders and its row (marked retired). A retired sale answers 410
//! `sale_retired` (buy, status) on every instance, its buyers still find their orders, it cannot
//! be seeded again, and the janitor retires sales by itself after `SECKILL_RETIRE_AFTER`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use seckill::redis::keys::{sales_registry_key, shards_registry_key};
use serde_json::{Value, json};

use crate::common::scan_keys;
use crate::helpers::{
    ADMIN_TOKEN, TestApp, assert_error, new_sale_id, quick_janitor, spawn_app, spawn_app_with, spawn_instance_of,
};

pub(crate) async fn retire(app: &TestApp, sale: &str) -> reqwest::Response {
    let url = app.url(&format!("/admin/sales/{sale}"));
    app.client.delete(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap()
}

/// The deployment's keys, limiter keys excepted.
fn sale_keys_of(app: &TestApp) -> BTreeSet<String> {
    let prefix = &app.config.key_prefix;
    scan_keys(&format!("{prefix}:*")).into_iter().filter(|k| !k.contains(":ratelimit:")).collect()
}

fn keys_of_sale(keys: &BTreeSet<String>, sale: &str) -> usize {
    keys.iter().filter(|k| k.contains(&format!("{{sale:{sale}"))).count()
}

async fn registry(app: &TestApp, key: String) -> BTreeSet<String> {
    app.redis.clone().smembers(key).await.unwrap()
}

/// Sells the whole stock to `buyer-0..` and waits until Postgres has every order.
async fn sell_out(app: &TestApp, sale: &str, stock: usize) -> Vec<String> {
    let mut order_ids = vec![];
    for i in 0..stock {
        let response = app.buy(sale, &format!("buyer-{i}")).await;
        assert_eq!(response.status(), 201);
        let body: Value = response.json().await.unwrap();
        order_ids.push(body["order_id"].as_str().unwrap().to_owned());
    }
    assert_error(app.buy(sale, "late").await, 410, "sold_out").await;
    app.wait_for_drain(sale).await;
    order_ids
}

async fn retired_at_set(app: &TestApp, sale: &str) -> bool {
    sqlx::query_scalar("select retired_at is not null from sales where sale_id = $1")
        .bind(sale)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retiring_a_drained_sale_removes_its_keys_and_registration_and_postgres_keeps_its_orders() {
    let app = spawn_app().await;
    let (sale, live) = (new_sale_id(), new_sale_id());
    app.seed_stock(&sale, 3).await;
    app.seed_stock(&live, 5).await;
    let order_ids = sell_out(&app, &sale, 3).await;
    let before = sale_keys_of(&app);
    assert_eq!(keys_of_sale(&before, &sale), 5, "meta, stock, buyers, orders, receipts: {before:?}");

    let response = retire(&app, &sale).await;
    assert_eq!(response.status(), 200);
    let report: Value = response.json().await.unwrap();
    assert_eq!(
        (&report["sold"], &report["persisted"], &report["buyers_removed"], &report["receipts_removed"]),
        (&json!(3), &json!(3), &json!(3), &json!(3)),
        "{report}"
    );
    assert_eq!(report["keys_removed"], 5, "{report}");

    let after = sale_keys_of(&app);
    assert_eq!(keys_of_sale(&after, &sale), 0, "no key of the retired sale is left: {after:?}");
    assert_eq!(after, before.iter().filter(|k| !k.contains(&sale)).cloned().collect(), "the live sale's keys stay");
    let sales = registry(&app, sales_registry_key(&app.config.key_prefix)).await;
    assert!(!sales.contains(&sale) && sales.contains(&live), "{sales:?}");
    assert_eq!(app.order_users(&sale).await.len(), 3, "Postgres keeps the orders");
    assert!(retired_at_set(&app, &sale).await, "the row is marked retired");

    // 410 to buyers and to the public status; a buyer still finds its order; no second life.
    assert_error(app.buy(&sale, "newcomer").await, 410, "sale_retired").await;
    assert_error(app.buy(&sale, "buyer-0").await, 410, "sale_retired").await;
    assert_error(app.client.get(app.url(&format!("/sales/{sale}"))).send().await.unwrap(), 410, "sale_retired").await;
    let order = app.client.get(app.url(&format!("/sales/{sale}/order?user_id=buyer-0"))).send().await.unwrap();
    assert_eq!(order.status(), 200);
    let order: Value = order.json().await.unwrap();
    assert_eq!((order["status"].as_str(), order["order_id"].as_str()), (Some("confirmed"), Some(&*order_ids[0])));
    let stranger = app.client.get(app.url(&format!("/sales/{sale}/order?user_id=stranger"))).send().await.unwrap();
    assert_error(stranger, 410, "sale_retired").await;
    assert_error(app.seed(&sale, json!({"stock": 3})).await, 409, "sale_retired").await;
    let repair = app.client.post(app.url(&format!("/admin/sales/{sale}/reconcile"))).bearer_auth(ADMIN_TOKEN);
    // A repair does not bring it back either, and says why (410, as every other route; was 404).
    assert_error(repair.send().await.unwrap(), 410, "sale_retired").await;
    assert_eq!(keys_of_sale(&sale_keys_of(&app), &sale), 0);

    // Retired twice: 410; unknown: 404; the live sale still sells.
    assert_error(retire(&app, &sale).await, 410, "sale_retired").await;
    assert_error(retire(&app, &new_sale_id()).await, 404, "unknown_sale").await;
    assert_eq!(app.buy(&live, "buyer-0").await.status(), 201);

    // The worker dropped the sale's stream and its metric series.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        if !metrics.contains(&sale) {
            break;
        }
        assert!(Instant::now() < until, "the retired sale's series stay in /metrics");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_still_open_or_with_queued_orders_is_refused_with_its_reasons() {
    let app = spawn_app_with(|_| {}, false).await;
    let (open, queued) = (new_sale_id(), new_sale_id());
    app.seed_stock(&open, 5).await;
    app.seed_stock(&queued, 1).await;
    assert_eq!(app.buy(&open, "a").await.status(), 201);
    assert_eq!(app.buy(&queued, "a").await.status(), 201);

    for (sale, reasons) in [(&open, json!(["open", "queued"])), (&queued, json!(["queued"]))] {
        let response = retire(&app, sale).await;
        assert_eq!(response.status(), 409);
        let body: Value = response.json().await.unwrap();
        assert_eq!((&body["error"], &body["reasons"]), (&json!("not_retirable"), &reasons), "{body}");
        assert!(!retired_at_set(&app, sale).await, "nothing changed");
        assert_eq!(keys_of_sale(&sale_keys_of(&app), sale), 5);
    }
    assert_eq!(app.buy(&open, "b").await.status(), 201, "a refused sale keeps selling");
}

/// A retirement stopped after its mark is finished by the next one, which looks at the sale once
/// more before it deletes the streams. Should Redis have lost the sale's meta but not its stream
/// (removed by hand, evicted), the orders still queued there refuse it (409 `queued`, the mark
/// kept) and stay; before, the last look took the missing meta for nothing left and deleted them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retirement_finished_over_a_lost_meta_keeps_the_orders_still_queued() {
    let app = spawn_app_with(|_| {}, false).await; // no worker: the order stays queued
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    assert_eq!(app.buy(&sale, "a").await.status(), 201);
    let keys =
        seckill::redis::keys::SaleKeys::new(&app.config.key_prefix, &seckill::domain::SaleId::parse(&sale).unwrap());
    // A retirement stopped after its mark, then the meta lost.
    sqlx::query("update sales set retired_at = now() where sale_id = $1").bind(&sale).execute(&app.pool).await.unwrap();
    let mut redis = app.redis.clone();
    let _: () = redis.del(&keys.meta).await.unwrap();

    let response = retire(&app, &sale).await;
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert_eq!((&body["error"], &body["reasons"]), (&json!("not_retirable"), &json!(["queued"])), "{body}");
    let entries: usize = redis.xlen(&keys.orders).await.unwrap();
    assert_eq!(entries, 1, "the queued order is still in its stream");
    assert!(retired_at_set(&app, &sale).await, "the mark is kept: nothing reopens the sale");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_instance_answers_410_promptly_after_a_retirement() {
    // Sold-out flags that never lapse in the test: the other instance's flag (set below) can only
    // give way to `sale_retired` through the retirement's event.
    let app = spawn_app_with(|c| c.sold_out_flag_ttl = Duration::from_secs(3600), true).await;
    let other = spawn_instance_of(&app).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 1).await;
    assert_eq!(other.buy(&sale, "a").await.status(), 201);
    assert_error(other.buy(&sale, "b").await, 410, "sold_out").await;
    assert_eq!(other.client.get(other.url(&format!("/sales/{sale}"))).send().await.unwrap().status(), 200);
    app.wait_for_drain(&sale).await;

    assert_eq!(retire(&app, &sale).await.status(), 200);
    let retired = Instant::now();
    loop {
        let buy = other.buy(&sale, "c").await;
        let buy = (buy.status().as_u16(), buy.json::<Value>().await.unwrap()["error"].clone());
        let status = other.client.get(other.url(&format!("/sales/{sale}"))).send().await.unwrap().status();
        if (buy.0, &buy.1, status.as_u16()) == (410, &json!("sale_retired"), 410) {
            break;
        }
        assert!(retired.elapsed() < Duration::from_secs(20), "the other instance still answers {buy:?}/{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("the other instance answered sale_retired {:?} after the retirement", retired.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_janitor_retires_a_sale_after_its_grace_and_leaves_open_ones() {
    let app = spawn_app_with(quick_janitor, true).await;
    let (done, open) = (new_sale_id(), new_sale_id());
    app.seed_stock(&done, 2).await;
    app.seed_stock(&open, 5).await;
    sell_out(&app, &done, 2).await;
    let until = Instant::now() + Duration::from_secs(15);
    while !retired_at_set(&app, &done).await || keys_of_sale(&sale_keys_of(&app), &done) > 0 {
        assert!(Instant::now() < until, "the janitor did not retire the sold-out sale");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_error(app.buy(&done, "x").await, 410, "sale_retired").await;
    assert!(!retired_at_set(&app, &open).await, "an open sale is not retired");
    assert_eq!(app.buy(&open, "x").await.status(), 201);
}

/// A sale the janitor cannot read (a sharded sale whose shard 1 Redis lost) is skipped, and the
/// round still retires the sale that is due: one unreadable sale held back every retirement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_the_janitor_cannot_read_holds_back_no_other_retirement() {
    use seckill::domain::SaleId;
    let app = spawn_app_with(quick_janitor, true).await;
    let (broken, done) = (new_sale_id(), new_sale_id());
    assert_eq!(app.seed(&broken, json!({"stock": 4, "shards": 2})).await.status(), 200);
    let broken_id = SaleId::parse(&broken).unwrap();
    // Shard 1's keys as the sale's layout names them (a Cluster picks the shards' suffixes).
    let shard_meta = app.store.all_shard_keys(&broken_id).await.unwrap()[1].meta.clone();
    let _: i64 = app.redis.clone().del(&shard_meta).await.unwrap();
    assert!(app.store.sale_state(&broken_id).await.is_err(), "the broken sale cannot be read");
    app.seed_stock(&done, 2).await;
    sell_out(&app, &done, 2).await;
    let until = Instant::now() + Duration::from_secs(15);
    while !retired_at_set(&app, &done).await || keys_of_sale(&sale_keys_of(&app), &done) > 0 {
        assert!(Instant::now() < until, "the janitor did not retire the sold-out sale");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!retired_at_set(&app, &broken).await, "the unreadable sale is left alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_sale_retires_every_shard() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    let seeded = app.seed(&sale, json!({"stock": 6, "shards": 3})).await;
    assert_eq!(seeded.status(), 200);
    sell_out(&app, &sale, 6).await;
    assert_eq!(keys_of_sale(&sale_keys_of(&app), &sale), 15);
    let shards_key = shards_registry_key(&app.config.key_prefix);
    assert_eq!(registry(&app, shards_key.clone()).await.len(), 2);

    let response = retire(&app, &sale).await;
    assert_eq!(response.status(), 200);
    let report: Value = response.json().await.unwrap();
    assert_eq!(
        (&report["shards"], &report["keys_removed"], &report["buyers_removed"]),
        (&json!(3), &json!(15), &json!(6))
    );
    assert_eq!(keys_of_sale(&sale_keys_of(&app), &sale), 0, "every shard's keys are gone");
    assert!(registry(&app, shards_key).await.is_empty(), "the shards are unregistered");
    assert_eq!(app.order_users(&sale).await.len(), 6);
}

/// Asks `GET /sales/{id}` for each id, 50 at a time; the statuses in order.
async fn statuses(app: &TestApp, ids: &[String]) -> Vec<u16> {
    use futures::StreamExt;
    futures::stream::iter(ids)
        .map(|id| async move { app.client.get(app.url(&format!("/sales/{id}"))).send().await.unwrap().status().as_u16() })
        .buffered(50)
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_negative_cache_hides_no_sale_seeded_retired_or_lost_after_its_id_was_asked() {
    let app = spawn_app().await;
    let (fresh, missed, retired, lost) = (new_sale_id(), new_sale_id(), new_sale_id(), new_sale_id());
    app.seed_stock(&lost, 2).await;
    assert_eq!(app.buy(&lost, "kept").await.status(), 201);
    app.wait_for_drain(&lost).await;
    crate::redis_loss::lose_sale(&app, &lost).await;
    let retire_behind_its_back = "insert into sales (sale_id, stock_initial, retired_at) values ($1, 1, now())";
    sqlx::query(retire_behind_its_back).bind(&retired).execute(&app.pool).await.unwrap();

    // Asked among 500 made-up ids: each answered from its own batch's row.
    let mut ids: Vec<String> = (0..500).map(|i| format!("bogus-{i}-{}", new_sale_id())).collect();
    ids.splice(250..250, [fresh.clone(), missed.clone(), retired.clone(), lost.clone()]);
    let answers = statuses(&app, &ids).await;
    for (id, status) in ids.iter().zip(&answers) {
        assert_eq!(*status, if *id == retired { 410 } else { 404 }, "{id}");
    }

    // Each of the three now has a "not retired" answer kept.
    app.seed_stock(&fresh, 1).await;
    assert_eq!(app.buy(&fresh, "first").await.status(), 201, "a sale seeded after its id was asked sells at once");
    let until = Instant::now() + Duration::from_secs(20);
    while app.client.get(app.url(&format!("/sales/{fresh}"))).send().await.unwrap().status() != 200 {
        assert!(Instant::now() < until, "the seeded sale is still unknown to GET /sales/{{id}}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Redis lost it, Postgres holds its order: never sold again, its buyer still finds the order.
    assert_error(app.buy(&lost, "newcomer").await, 404, "unknown_sale").await;
    assert_error(app.seed(&lost, json!({"stock": 2})).await, 409, "sale_has_orders").await;
    let order = app.client.get(app.url(&format!("/sales/{lost}/order?user_id=kept"))).send().await.unwrap();
    assert_eq!(order.status(), 200);
    assert_eq!(order.json::<Value>().await.unwrap()["status"], "confirmed");

    // Retired where this instance heard no event: seen once the kept "not retired" lapses.
    sqlx::query(retire_behind_its_back).bind(&missed).execute(&app.pool).await.unwrap();
    let asked = Instant::now();
    while app.buy(&missed, "late").await.status() != 410 {
        // Never, were the answer kept for good; a loaded host's slack beside its lapse.
        let lapse = seckill::purchase::retired::ANSWER_TTL + Duration::from_secs(10);
        assert!(asked.elapsed() < lapse, "a retirement this instance missed is still unknown");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_error(app.client.get(app.url(&format!("/sales/{missed}"))).send().await.unwrap(), 410, "sale_retired").await;
}

/// A sale of 2 sold out and a retirement of it with a minute's grace, waited for until it has
/// marked and unregistered the sale (a state, not a time): the retirement's task, in its grace.
async fn retiring_in_its_grace(
    app: &TestApp,
    sale: &str,
) -> tokio::task::JoinHandle<Result<seckill::retire::RetireOutcome, seckill::retire::RetireError>> {
    let id = seckill::domain::SaleId::parse(sale).unwrap();
    app.seed_stock(sale, 2).await;
    sell_out(app, sale, 2).await;
    let metrics = std::sync::Arc::new(seckill::metrics::Metrics::new());
    let retirer = seckill::retire::Retirer::new(app.store.clone(), app.pool.clone(), metrics, Duration::from_secs(60));
    let retiring = tokio::spawn(async move { retirer.retire(&id).await });
    let registered = sales_registry_key(&app.config.key_prefix);
    let deadline = Instant::now() + Duration::from_secs(30);
    while registry(app, registered.clone()).await.contains(sale) {
        assert!(Instant::now() < deadline && !retiring.is_finished(), "the retirement never unregistered the sale");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(retired_at_set(app, sale).await);
    retiring
}

/// A restock (or a release) that passed its own checks before the retirement's mark reopens
/// nothing to sell: once the retirement has unregistered the sale (its grace, before the keys
/// go), the sale has ended in Redis, so a purchase the restocked unit would have let in, whose
/// order the retirement would then delete with the stream, is answered "ended". Waits for the
/// state (the sale out of the registry), not for a time: the grace is a minute long here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restock_racing_a_retirement_sells_nothing_the_retirement_deletes() {
    use seckill::domain::SaleId;

    let app = spawn_app().await;
    let sale = new_sale_id();
    let retiring = retiring_in_its_grace(&app, &sale).await;

    // The restock that passed its check before the mark, then a purchase of its unit.
    let id = SaleId::parse(&sale).unwrap();
    let restocked = seckill::controls::restock(&app.store, &id, 1, 1_000_000).await.unwrap();
    assert!(matches!(restocked, seckill::controls::Restock::Done { stock_left: 1, .. }), "{restocked:?}");
    let keys = app.store.keyspace().sale_keys(&id);
    let mut call = seckill::redis::lua::BUY.key(&keys.all()[..]);
    call.arg(&sale).arg("racer").arg(uuid::Uuid::now_v7().to_string()).arg(1).arg("").arg("");
    let reply: String = call.invoke_async(&mut app.redis.clone()).await.unwrap();
    assert_eq!(reply, "ended", "nothing sells into the stream the retirement is about to delete");
    retiring.abort();
}

/// A retirement stopped during its grace (the process shut down: the task dropped) leaves the
/// sale marked, unregistered and its keys in Redis; the next retirement of it finishes the job
/// (on the old code it answered "already retired" and the keys stayed for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retirement_stopped_after_its_mark_is_finished_by_the_next() {
    use seckill::domain::SaleId;
    use seckill::retire::{RetireOutcome, Retirer};

    let app = spawn_app().await;
    let sale = new_sale_id();
    let retiring = retiring_in_its_grace(&app, &sale).await;
    retiring.abort();
    assert!(retiring.await.unwrap_err().is_cancelled());
    assert!(keys_of_sale(&sale_keys_of(&app), &sale) > 0, "stopped in its grace: the keys are still there");

    let id = SaleId::parse(&sale).unwrap();
    let metrics = std::sync::Arc::new(seckill::metrics::Metrics::new());
    let quick = Retirer::new(app.store.clone(), app.pool.clone(), metrics, Duration::from_millis(10));
    match quick.retire(&id).await.unwrap() {
        RetireOutcome::Retired(report) => assert_eq!((report.persisted, report.sold), (2, 2), "{report:?}"),
        other => panic!("the stopped retirement is not finished: {other:?}"),
    }
    assert_eq!(keys_of_sale(&sale_keys_of(&app), &sale), 0, "every key is gone");
    assert_eq!(quick.retire(&id).await.unwrap(), RetireOutcome::AlreadyRetired, "nothing left the next time");
}

/// A refund with restock that commits between the retirement's checks and its mark (it holds
/// the sale's row only until it commits) leaves a release owed: the retirement's last look, after
/// the sale has ended in Redis, finds it and refuses (`reserved`), the mark taken back. A
/// trigger on the mark makes the refund land at exactly that moment, in the mark's own
/// transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_with_restock_landing_at_the_mark_is_found_by_the_last_look() {
    use seckill::domain::SaleId;
    use seckill::retire::{Refusal, RetireOutcome, Retirer};

    let app = spawn_app().await;
    let sale = new_sale_id();
    let seeded = app.seed(&sale, json!({"stock": 1, "payment_window": "30s"})).await;
    assert_eq!(seeded.status(), 200);
    let bought: Value = app.buy(&sale, "payer").await.json().await.unwrap();
    let order_id = bought["order_id"].as_str().unwrap().to_owned();
    app.wait_for_drain(&sale).await;
    assert_eq!(app.pay(&sale, &order_id, "evt-payer").await.status(), 200);
    for statement in [
        "create function refund_at_the_mark() returns trigger language plpgsql as $$ begin
           update orders set status = 'refunded', refunded_at = now(), refund_restock = true
           where sale_id = new.sale_id and status = 'paid';
           return new;
         end $$",
        "create trigger refund_at_the_mark after update of retired_at on sales for each row
           when (old.retired_at is null and new.retired_at is not null) execute function refund_at_the_mark()",
    ] {
        sqlx::query(statement).execute(&app.pool).await.unwrap();
    }

    let metrics = std::sync::Arc::new(seckill::metrics::Metrics::new());
    let retirer = Retirer::new(app.store.clone(), app.pool.clone(), metrics, Duration::from_millis(10));
    let outcome = retirer.retire(&SaleId::parse(&sale).unwrap()).await.unwrap();
    assert!(matches!(&outcome, RetireOutcome::Refused(reasons) if reasons.contains(&Refusal::Reserved)), "{outcome:?}");
    assert!(!retired_at_set(&app, &sale).await, "the mark is taken back");
}

/// Two instances' janitor rounds: the second starts after the first's lock would have expired
/// (the lock lived one interval, and a round outlasts it: each batch of 16 retirements waits its
/// grace), while the first still retires. The first keeps its lock, so the second does nothing:
/// each sale is retired and audited once (the second round retired the sales of the first's
/// second batch too, still registered, and both audited them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn janitor_rounds_of_two_instances_never_overlap_and_audit_a_retirement_once() {
    use seckill::retire::Retirer;
    use seckill::retire::janitor::Janitor;
    let app = spawn_app().await;
    let sales: Vec<String> = (0..17).map(|_| new_sale_id()).collect();
    for sale in &sales {
        app.seed_stock(sale, 1).await;
        sell_out(&app, sale, 1).await;
    }
    let metrics = std::sync::Arc::new(seckill::metrics::Metrics::new());
    // A grace of over 3 s (one blocking read of 3 s), rounds every 200 ms, sales due at once.
    let janitor = |owner: &str| {
        let retirer = Retirer::new(app.store.clone(), app.pool.clone(), metrics.clone(), Duration::from_secs(3));
        Janitor::new(retirer, Duration::ZERO, Duration::from_millis(200), owner.to_owned())
    };
    let (first, second) = (janitor("first"), janitor("second"));
    let (first, second) = tokio::join!(first.round(), async {
        // Past the first lock's lease (1 s), were it not kept.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        second.round().await
    });
    // The first's, unless a stall of its runtime let its lease run out: then it stops after its
    // batch in flight, and the second retires the rest.
    assert_eq!(first.unwrap() + second.unwrap(), 17, "each sale retired by one round");
    let audited: Vec<(String, i64)> = sqlx::query_as(
        "select sale_id, count(*) from sale_audit where action = 'retire' group by sale_id having count(*) > 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(audited, [], "each retirement in the audit trail once");
    for sale in &sales {
        assert!(retired_at_set(&app, sale).await && keys_of_sale(&sale_keys_of(&app), sale) == 0, "{sale}");
    }
}

/// A round that ends before its interval holds the lock for the rest of it: the deployment runs
/// one round per interval, whichever instance takes it (a lock given up at each round's end let
/// every instance run a round every interval).
#[tokio::test]
async fn a_janitor_round_holds_its_lock_for_the_rest_of_the_interval() {
    use seckill::retire::Retirer;
    use seckill::retire::janitor::Janitor;
    let app = spawn_app().await;
    let metrics = std::sync::Arc::new(seckill::metrics::Metrics::new());
    let janitor = |owner: &str| {
        let retirer = Retirer::new(app.store.clone(), app.pool.clone(), metrics.clone(), Duration::from_millis(10));
        Janitor::new(retirer, Duration::ZERO, Duration::from_secs(60), owner.to_owned())
    };
    assert_eq!(janitor("first").round().await.unwrap(), 0, "nothing due");
    let lock = format!("{}:retire-lock", app.config.key_prefix);
    let (owner, ttl): (Option<String>, i64) =
        redis::pipe().get(&lock).pttl(&lock).query_async(&mut app.redis.clone()).await.unwrap();
    assert_eq!(owner.as_deref(), Some("first"));
    assert!((50_000..=60_000).contains(&ttl), "held for the rest of the minute: {ttl} ms");
}
