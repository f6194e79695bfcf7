//! Sharded sales (docs/stock-sharding.md): one sale's stock split over K shards in different
//! slots. Exactly the stock is sold, once per user, whatever shard a user lands on; shards that
//! sell out send their users on to the others; the shard count is fixed and a started sharded
//! sale is never re-seeded; status and reconciliation cover every shard.

use std::collections::{BTreeSet, HashMap};

use futures::StreamExt;
use redis::AsyncCommands;
use seckill::domain::{SaleId, UserId};
use seckill::purchase::shards::{Layout, home_shard};
use seckill::redis::keys::SaleKeys;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::{first_redis_url, redis_masters};
use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, new_sale_id, spawn_app};

/// Seeds a sale open now with `stock` over `shards` shards, asserting it worked.
pub(crate) async fn seed_sharded(app: &TestApp, stock: i64, shards: u32) -> String {
    let sale = new_sale_id();
    let response = app.seed(&sale, json!({"stock": stock, "shards": shards})).await;
    assert_eq!(response.status(), 200, "seeding: {}", response.text().await.unwrap());
    sale
}

/// The keys of each of the sale's shards, shard 0 first.
pub(crate) async fn shard_keys(app: &TestApp, sale: &str) -> Vec<SaleKeys> {
    let id = SaleId::parse(sale).unwrap();
    let layout = app.store.read_layout(&id).await.unwrap().expect("a seeded sale has a layout");
    layout.keys(&app.config.key_prefix, &id)
}

/// Per shard: (stock_initial, stock left, buyers).
async fn shard_figures(app: &TestApp, sale: &str) -> Vec<(i64, i64, BTreeSet<String>)> {
    let mut redis = app.redis.clone();
    let mut figures = vec![];
    for keys in shard_keys(app, sale).await {
        let initial: i64 = redis.hget(&keys.meta, "stock_initial").await.unwrap();
        let left: i64 = redis.get(&keys.stock).await.unwrap();
        let buyers: BTreeSet<String> = redis.smembers(&keys.buyers).await.unwrap();
        figures.push((initial, left, buyers));
    }
    figures
}

/// Each shard balances on its own and no user is a buyer in two shards.
async fn assert_shards_balance(app: &TestApp, sale: &str) {
    let mut seen = BTreeSet::new();
    for (shard, (initial, left, buyers)) in shard_figures(app, sale).await.into_iter().enumerate() {
        assert!(left >= 0, "shard {shard}: negative stock {left}");
        assert_eq!(initial, left + buyers.len() as i64, "shard {shard}: stock_initial = left + buyers");
        let twice: Vec<_> = buyers.iter().filter(|u| seen.contains(*u)).collect();
        assert!(twice.is_empty(), "shard {shard}: users who also bought in another shard: {twice:?}");
        seen.extend(buyers);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_sale_sells_exactly_its_stock_once_per_user_under_concurrent_duplicates() {
    let app = spawn_app().await;
    let (stock, users, tries) = (90, 200, 3);
    let sale = seed_sharded(&app, stock, 3).await;

    // Every user sends three requests at once; the shards sell out at different moments, so
    // users keep falling over to the next shard while their own duplicates race them.
    let requests = (0..users).flat_map(|u| (0..tries).map(move |_| format!("user-{u}")));
    let answers: Vec<(String, u16, Value)> = futures::stream::iter(requests)
        .map(|user| {
            let (app, sale) = (&app, &sale);
            async move {
                let response = app.buy(sale, &user).await;
                let status = response.status().as_u16();
                (user, status, response.json().await.unwrap())
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;

    let mut created: HashMap<&str, Vec<Uuid>> = HashMap::new();
    for (user, status, body) in &answers {
        match status {
            201 => created.entry(user).or_default().push(body["order_id"].as_str().unwrap().parse().unwrap()),
            409 => assert_eq!(body["error"], "already_purchased"),
            410 => assert_eq!(body["error"], "sold_out"),
            other => panic!("{user}: unexpected {other} {body}"),
        }
    }
    let twice: Vec<_> = created.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(twice.is_empty(), "users with two 201s: {twice:?}");
    assert_eq!(created.len(), stock as usize, "exactly the stock is sold");

    let confirmed: BTreeSet<Uuid> = created.values().flatten().copied().collect();
    let status = app.assert_invariants(&sale, &confirmed).await;
    assert_eq!((status.stock_initial, status.stock_left, status.sold, status.shards), (stock, 0, stock, 3));
    assert_eq!(app.order_ids(&sale).await, confirmed, "Postgres holds exactly the confirmed orders");
    assert_shards_balance(&app, &sale).await;
}

#[tokio::test]
async fn users_whose_home_shard_sold_out_fall_over_to_the_other_shards() {
    let app = spawn_app().await;
    let sale = seed_sharded(&app, 3, 3).await; // one item per shard
    // Three users with the same home shard: the first empties it, the others move on.
    let home = |u: &String| home_shard(&UserId::parse(u).unwrap(), 3);
    let users: Vec<String> = (0..).map(|i| format!("user-{i}")).filter(|u| home(u) == 1).take(3).collect();
    for user in &users {
        assert_eq!(app.buy(&sale, user).await.status(), 201, "{user}");
    }
    let per_shard: Vec<usize> = shard_figures(&app, &sale).await.iter().map(|(_, _, b)| b.len()).collect();
    assert_eq!(per_shard, [1, 1, 1], "one buyer in each shard");
    assert_error(app.buy(&sale, "newcomer").await, 410, "sold_out").await;
    assert_error(app.buy(&sale, &users[2]).await, 409, "already_purchased").await;
    app.assert_invariants(&sale, &BTreeSet::new()).await;
    assert_shards_balance(&app, &sale).await;
}

/// A purchase's keys are built once per sale and kept, and the instance keeps those of a
/// bounded number of sales however many ids come: past the bound they are let go (and built
/// again, alike).
#[tokio::test]
async fn the_keys_an_instance_keeps_are_each_sales_own_and_bounded() {
    let app = spawn_app().await;
    let prefix = app.store.keyspace().prefix().to_owned();
    let first = SaleId::parse(&new_sale_id()).unwrap();
    let kept = app.store.sale_keys(&first);
    assert_eq!(*kept, SaleKeys::new(&prefix, &first));
    assert!(std::sync::Arc::ptr_eq(&kept, &app.store.sale_keys(&first)), "kept, not built again");
    let grouped = SaleId::parse("keys-drop.42").unwrap();
    assert_eq!(*app.store.sale_keys(&grouped), SaleKeys::new(&prefix, &grouped), "a group's sale: its own keys");
    for i in 0..1_000 {
        let other = SaleId::parse(&format!("keys-{i}")).unwrap();
        assert_eq!(app.store.sale_keys(&other).meta, SaleKeys::new(&prefix, &other).meta);
    }
    let again = app.store.sale_keys(&first);
    assert!(!std::sync::Arc::ptr_eq(&kept, &again), "a thousand other sales later, the first's keys were let go");
    assert_eq!(*again, *kept, "and built again alike");
}

#[tokio::test]
async fn the_shard_count_is_fixed_by_the_first_seed() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    let later = json!({"stock": 10, "shards": 2, "starts_at": "2999-01-01T00:00:00Z"});
    assert_eq!(app.seed(&sale, later).await.status(), 200);
    let other_count = json!({"stock": 10, "shards": 3, "starts_at": "2999-01-01T00:00:00Z"});
    assert_error(app.seed(&sale, other_count).await, 409, "shards_fixed").await;
    // Re-seeding before the start keeps the layout, with or without naming the count.
    let reseed = app.seed(&sale, json!({"stock": 21, "starts_at": "2998-01-01T00:00:00Z"})).await;
    assert_eq!(reseed.status(), 200);
    let body: Value = reseed.json().await.unwrap();
    assert_eq!((body["stock_initial"].as_i64(), body["shards"].as_i64()), (Some(21), Some(2)));
    let figures: Vec<i64> = shard_figures(&app, &sale).await.iter().map(|(initial, _, _)| *initial).collect();
    assert_eq!(figures, [11, 10], "the stock split over the same two shards");
    assert_error(app.buy(&sale, "early").await, 403, "sale_not_started").await;

    let unsharded = new_sale_id();
    app.seed_stock(&unsharded, 5).await;
    assert_error(app.seed(&unsharded, json!({"stock": 5, "shards": 2})).await, 409, "shards_fixed").await;
    for bad in [0, 17] {
        assert_error(app.seed(&new_sale_id(), json!({"stock": 5, "shards": bad})).await, 400, "invalid_request").await;
    }
}

/// Two first seeds of one sale at once, one sharded and one with a payment window (which a shard
/// cannot hold): whichever wins, the sale never ends up sharded with a window. Both looked for the
/// sale's shards before either wrote them, then waited for its row (here the test's uncommitted
/// row); the sharded one won half the time and the other then seeded every shard with the window.
#[tokio::test]
async fn first_seeds_racing_never_shard_a_sale_with_a_payment_window() {
    let app = spawn_app().await;
    for _ in 0..8 {
        let sale = new_sale_id();
        let mut holder = app.pool.begin().await.unwrap();
        sqlx::query("insert into sales (sale_id, stock_initial) values ($1, 1)")
            .bind(&sale)
            .execute(&mut *holder)
            .await
            .unwrap();
        let sharded = app.seed(&sale, json!({"stock": 10, "shards": 3, "starts_at": "2999-01-01T00:00:00Z"}));
        let windowed = app.seed(&sale, json!({"stock": 10, "payment_window": "1m"}));
        let release = async {
            crate::helpers::lock_waiters(&app.pool, 2).await; // both seeds, on the row
            holder.rollback().await.unwrap();
        };
        let (a, b, ()) = tokio::join!(sharded, windowed, release);
        let statuses = (a.status().as_u16(), b.status().as_u16());
        assert!(matches!(statuses, (200, 409) | (409, 200)), "one seed wins, the other is refused: {statuses:?}");
        let window: Option<i64> = sqlx::query_scalar("select payment_window_ms from sales where sale_id = $1")
            .bind(&sale)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        let shards = shard_keys(&app, &sale).await.len();
        assert!(shards == 1 || window.is_none(), "{shards} shards with a window of {window:?} ms");
        let keys = &shard_keys(&app, &sale).await[shards - 1];
        let in_redis: Option<String> = app.redis.clone().hget(&keys.meta, "payment_window_ms").await.unwrap();
        assert!(shards == 1 || in_redis.is_none(), "{shards} shards with a window in Redis: {in_redis:?}");
    }
}

/// A buyer who fell over to another shard, whose purchase Redis lost there, is restored on the
/// shard it bought on. The repair put every lost buyer into its home shard, which had sold out
/// before it fell over (overdrawn there), and left the unit in the shard that lost the purchase,
/// to be sold again: three orders on a stock of two.
#[tokio::test]
async fn a_fallen_over_buyer_redis_lost_is_restored_on_the_shard_it_bought_on() {
    let app = spawn_app().await;
    let sale = seed_sharded(&app, 2, 2).await; // a unit a shard
    let homed_on_0: Vec<String> =
        (0..).map(|i| format!("fall-{i}")).filter(|u| home_shard(&UserId::parse(u).unwrap(), 2) == 0).take(3).collect();
    let (x, u, y) = (&homed_on_0[0], &homed_on_0[1], &homed_on_0[2]);
    assert_eq!(app.buy(&sale, x).await.status(), 201);
    assert_eq!(app.buy(&sale, u).await.status(), 201, "its home shard sold out: u falls over to shard 1");
    app.wait_for_drain(&sale).await;
    // Redis forgets u's purchase on shard 1 (a failover within its fsync interval).
    let keys = &shard_keys(&app, &sale).await[1];
    let _: () = redis::pipe()
        .srem(&keys.buyers, u)
        .ignore()
        .hdel(&keys.receipts, u)
        .ignore()
        .incr(&keys.stock, 1)
        .ignore()
        .query_async(&mut app.redis.clone())
        .await
        .unwrap();
    let report = crate::redis_loss::repair(&app, &sale).await;
    assert_eq!((report.buyers_restored, report.overdrawn), (1, 0), "{report:?}");
    assert_shards_balance(&app, &sale).await;
    assert_error(app.buy(&sale, y).await, 410, "sold_out").await;
    assert_error(app.buy(&sale, u).await, 409, "already_purchased").await;
}

#[tokio::test]
async fn a_sharded_sale_is_never_reseeded_once_it_has_started() {
    let app = spawn_app().await;
    // Stock 0: nobody can buy, so only the start (not buyers) can refuse the re-seed.
    let sale = seed_sharded(&app, 0, 2).await;
    assert_error(app.seed(&sale, json!({"stock": 50})).await, 409, "sale_started").await;
    let status = app.status(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left), (0, 0), "nothing changed");
    assert_eq!(app.sales_row_stock(&sale).await, 0, "the Postgres row rolled back");
    // An unsharded sale without buyers may still be re-seeded after its start.
    let unsharded = new_sale_id();
    app.seed_stock(&unsharded, 0).await;
    app.seed_stock(&unsharded, 50).await;
}

#[tokio::test]
async fn buy_lua_refuses_a_caller_that_assumes_another_shard_count_and_writes_nothing() {
    let app = spawn_app().await;
    let sale = seed_sharded(&app, 30, 3).await;
    let keys = &shard_keys(&app, &sale).await[0];
    let mut call = seckill::redis::lua::BUY.key(&keys.all()[..]);
    call.arg(&sale).arg("alice").arg(Uuid::now_v7().to_string()).arg(1);
    let reply: String = seckill::redis::lua::run(&call, &mut app.redis.clone()).await.unwrap();
    assert_eq!(reply, "wrong_shards");
    let figures = shard_figures(&app, &sale).await;
    assert!(figures.iter().all(|(initial, left, buyers)| initial == left && buyers.is_empty()), "{figures:?}");
    // Through the API the store reads the layout and buys.
    assert_eq!(app.buy(&sale, "alice").await.status(), 201);
}

#[tokio::test]
async fn shards_sit_on_as_many_masters_as_there_are() {
    let app = spawn_app().await;
    let masters = redis_masters();
    // Eight sales per count: shards placed without looking at the slot map would share a master
    // in most of them (the three of K = 3 land on three masters by chance 2 times in 9).
    for shards in [2, 3] {
        for _ in 0..8 {
            let sale = seed_sharded(&app, 10, shards).await;
            let mut owners = BTreeSet::new();
            for keys in shard_keys(&app, &sale).await {
                owners.insert(master_of(&masters, &keys.meta));
            }
            assert_eq!(owners.len(), masters.len().min(shards as usize), "{shards} shards over {masters:?}");
        }
    }
    // On a single server the suffixes are simply the first ones.
    if masters.len() == 1 {
        let sale = seed_sharded(&app, 10, 3).await;
        let layout = app.store.read_layout(&SaleId::parse(&sale).unwrap()).await.unwrap().unwrap();
        assert_eq!(*layout, Layout::new(vec![1, 2]));
        assert_eq!(masters, [first_redis_url()]);
    }
}

/// The master whose plain connection serves `key` (another master answers MOVED).
fn master_of(masters: &[String], key: &str) -> String {
    let owners: Vec<&String> = masters
        .iter()
        .filter(|url| {
            let mut con = redis::Client::open(url.as_str()).and_then(|c| c.get_connection()).unwrap();
            redis::cmd("EXISTS").arg(key).query::<i64>(&mut con).is_ok()
        })
        .collect();
    assert_eq!(owners.len(), 1, "{key} is served by exactly one master: {owners:?}");
    owners[0].clone()
}

#[tokio::test]
async fn status_and_reconciliation_cover_every_shard() {
    let app = spawn_app().await;
    let sale = seed_sharded(&app, 30, 3).await;
    for i in 0..30 {
        assert_eq!(app.buy(&sale, &format!("user-{i}")).await.status(), 201);
    }
    app.wait_for_drain(&sale).await;
    // One user per shard loses its Postgres row behind the service's back.
    let mut lost: Vec<String> = vec![];
    for (_, _, buyers) in shard_figures(&app, &sale).await {
        lost.push(buyers.into_iter().next().expect("every shard sold"));
    }
    sqlx::query("delete from orders where sale_id = $1 and user_id = any($2)")
        .bind(&sale)
        .bind(&lost)
        .execute(&app.pool)
        .await
        .unwrap();
    lost.sort();

    let check = reconcile(&app, &sale, false).await;
    assert_eq!(check["missing_in_postgres"], json!(lost), "{check}");
    assert_eq!((check["buyers"].as_i64(), check["stock_balanced"].as_bool()), (Some(30), Some(true)), "{check}");
    let repair = reconcile(&app, &sale, true).await;
    assert_eq!(repair["reenqueued"], 3, "{repair}");
    let status = app.wait_for_drain(&sale).await;
    assert_eq!((status.sold, status.persisted), (30, Some(30)));
    let after = reconcile(&app, &sale, false).await;
    assert_eq!(after["consistent"], true, "{after}");
}

/// `GET` (check) or `POST` (repair) `/admin/sales/{sale}/reconcile`, as JSON.
async fn reconcile(app: &TestApp, sale: &str, repair: bool) -> Value {
    let url = app.url(&format!("/admin/sales/{sale}/reconcile"));
    let request = if repair { app.client.post(url) } else { app.client.get(url) };
    let response = request.bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Deletes every key of every shard of the sale, as a Redis that lost it would have none.
async fn lose_in_redis(app: &TestApp, sale: &str) {
    for keys in shard_keys(app, sale).await {
        let _: () = app.redis.clone().del(&keys.all()).await.unwrap();
    }
}

#[tokio::test]
async fn a_sale_lost_in_redis_and_seeded_anew_with_more_shards_has_every_order_persisted() {
    let app = spawn_app().await;
    let sale = seed_sharded(&app, 20, 2).await;
    for i in 0..4 {
        assert_eq!(app.buy(&sale, &format!("early-{i}")).await.status(), 201);
    }
    app.wait_for_drain(&sale).await; // the app and its worker know the two shards by now
    lose_in_redis(&app, &sale).await;
    sqlx::query("delete from orders where sale_id = $1").bind(&sale).execute(&app.pool).await.unwrap();

    let reseeded = app.seed(&sale, json!({"stock": 30, "shards": 3})).await;
    assert_eq!(reseeded.status(), 200, "a lost sale is a new sale");
    let mut confirmed = BTreeSet::new();
    for i in 0..30 {
        let response = app.buy(&sale, &format!("late-{i}")).await;
        assert_eq!(response.status(), 201);
        let body: Value = response.json().await.unwrap();
        confirmed.insert(body["order_id"].as_str().unwrap().parse::<Uuid>().unwrap());
    }
    // The third shard's stream is new to the worker: its orders reach Postgres all the same.
    let status = app.assert_invariants(&sale, &confirmed).await;
    assert_eq!((status.shards, status.sold, status.persisted), (3, 30, Some(30)));
    assert_shards_balance(&app, &sale).await;
}

#[tokio::test]
async fn a_kept_layout_that_leads_nowhere_is_read_again() {
    let app = spawn_app().await;
    let sale = seed_sharded(&app, 10, 2).await;
    let id = SaleId::parse(&sale).unwrap();
    let store = &app.store;
    assert_eq!(store.layout(&id).await.unwrap().unwrap().shards(), 2, "kept by this store");
    // The sale is lost and seeded anew by hand, its second shard under another suffix.
    lose_in_redis(&app, &sale).await;
    let prefix = &app.config.key_prefix;
    for (keys, suffixes) in [(SaleKeys::of_shard(prefix, &id, 777), ""), (SaleKeys::new(prefix, &id), "777")] {
        let mut call = seckill::redis::lua::SEED.key(&keys.state()[..]);
        call.arg(5).arg("").arg("").arg(2).arg(suffixes).arg("0").arg("").arg("").arg("").arg("").arg("");
        let reply: String = seckill::redis::lua::run(&call, &mut app.redis.clone()).await.unwrap();
        assert_eq!(reply, "ok");
    }
    for i in 0..10 {
        let user = UserId::parse(&format!("user-{i}")).unwrap();
        let verdict = store.buy(&id, (&user, 1), Uuid::now_v7(), (None, false), &[]).await.unwrap();
        assert_eq!(verdict.outcome, Some(seckill::purchase::BuyOutcome::Purchased { pay_by_ms: None }), "{user}");
    }
    assert_eq!(*store.layout(&id).await.unwrap().unwrap(), Layout::new(vec![777]));
}
