//! Shared by the test binaries: the throwaway servers that `cargo xtask test` starts (reached
//! through `testbed`'s handle file), per-test databases and key prefixes on them, and a `Probe`
//! that checks a running service's promises.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use seckill::domain::SaleId;
use seckill::http::routes::SaleStatus;
use seckill::purchase::Sales;
use seckill::redis::Keyspace;
use seckill::redis::connection::{RedisConnection, RedisTarget};
use seckill::redis::order_stream::CONSUMER_GROUP;
use secrecy::SecretString;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, PgPool};
use testbed::Services;
use uuid::Uuid;

pub mod drops;
pub mod receiver;

/// At least 32 bytes, as the service requires.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef";
/// The payment events' secret of the test services.
pub const PAYMENT_SECRET: &str = "test-payment-secret-0123456789abcdef";

/// The servers of this test run: `cargo xtask test` names their handle file in `SECKILL_TESTBED`.
pub fn testbed() -> &'static Services {
    static SERVICES: OnceLock<Services> = OnceLock::new();
    SERVICES.get_or_init(|| Services::from_env().unwrap_or_else(|error| panic!("{error:#}")))
}

/// The Redis the tests of this pass target: one server, or a cluster's comma-separated seed
/// nodes (the second pass of `cargo xtask test` runs the api tests against a 3-master cluster).
pub fn redis_url() -> String {
    testbed().redis_url()
}

/// The 3-master Redis Cluster (`cargo xtask test` always starts one).
pub fn cluster() -> &'static testbed::Cluster {
    testbed().cluster.as_ref().expect("no Redis Cluster in this test run: `cargo xtask test` starts one")
}

/// The URL of the test Postgres's maintenance database (tests create their databases through it).
pub fn postgres_url() -> String {
    testbed().postgres.url()
}

/// The first URL of `redis_url()`: the server, or one seed node.
pub fn first_redis_url() -> String {
    RedisTarget::parse(&redis_url()).expect("valid test Redis URL").urls()[0].clone()
}

/// A blocking connection, for tests outside async code: routed by key on a cluster.
pub fn sync_connection() -> Box<dyn redis::ConnectionLike> {
    match RedisTarget::parse(&redis_url()).expect("valid test Redis URL") {
        RedisTarget::Single(url) => Box::new(redis::Client::open(url).and_then(|c| c.get_connection()).unwrap()),
        RedisTarget::Cluster(seeds) => {
            Box::new(redis::cluster::ClusterClient::new(seeds).and_then(|c| c.get_connection()).unwrap())
        }
    }
}

/// The URL of every master: the server itself, or each master the cluster reports.
pub fn redis_masters() -> Vec<String> {
    let first = match RedisTarget::parse(&redis_url()).expect("valid test Redis URL") {
        RedisTarget::Single(url) => return vec![url],
        RedisTarget::Cluster(seeds) => seeds[0].clone(),
    };
    let mut con = redis::Client::open(first.as_str()).and_then(|c| c.get_connection()).unwrap();
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con).expect("cluster nodes");
    nodes
        .lines()
        .filter(|line| line.contains("master") && !line.contains("fail"))
        .filter_map(|line| line.split_whitespace().nth(1)?.split('@').next().map(|addr| format!("redis://{addr}")))
        .collect()
}

/// Every key matching `pattern`, scanned on every master (SCAN covers one node only).
pub fn scan_keys(pattern: &str) -> Vec<String> {
    let mut keys = vec![];
    for url in redis_masters() {
        let mut con = redis::Client::open(url).and_then(|c| c.get_connection()).unwrap();
        let found: redis::Iter<String> = redis::cmd("SCAN")
            .cursor_arg(0)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(5000)
            .clone()
            .iter(&mut con)
            .expect("scan");
        keys.extend(found.map(|key| key.expect("scan")));
    }
    keys
}

/// Creates an empty database on the test Postgres and returns its URL. It is dropped when the
/// thread that asked for it ends: a test's own thread, once the test has returned and its runtime
/// (with the services it ran in process) has stopped.
pub async fn create_database() -> String {
    let database = format!("t_{}", Uuid::now_v7().simple());
    let maintenance_url = postgres_url();
    let mut conn = PgConnection::connect(&maintenance_url).await.expect("connect to test postgres");
    sqlx::query(&format!("create database {database}")).execute(&mut conn).await.expect("create test database");
    CREATED.with(|created| created.borrow_mut().0.push(database.clone()));
    let (base, _) = maintenance_url.rsplit_once('/').expect("database url has a path");
    format!("{base}/{database}")
}

/// The databases a thread created, dropped with it. Each is some 8 MB of catalogs, and the
/// servers' files live in memory (tmpfs): a whole run's thousand databases kept to its end held
/// gigabytes of the host's memory.
struct Created(Vec<String>);

impl Drop for Created {
    fn drop(&mut self) {
        for database in &self.0 {
            // psql, not sqlx: no runtime can start while the thread's locals are torn down.
            let mut psql = std::process::Command::new(&testbed().tools.psql);
            psql.arg(postgres_url())
                .args(["-q", "-c", &format!("drop database if exists {database} with (force)")])
                .env("PGCONNECT_TIMEOUT", "10")
                .env("PGOPTIONS", "-c statement_timeout=30s")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            // A database left behind costs memory, not correctness: the run's end removes it.
            let _ = psql.status();
        }
    }
}

thread_local! {
    static CREATED: std::cell::RefCell<Created> = const { std::cell::RefCell::new(Created(Vec::new())) };
}

/// Keeps the database at `url` past the end of the thread that created it: an app shared by
/// several tests (a static) outlives the test that happened to start it.
pub fn keep_database(url: &str) {
    let (_, database) = url.rsplit_once('/').expect("database url has a path");
    CREATED.with(|created| created.borrow_mut().0.retain(|kept| kept != database));
}

/// A Redis key prefix no other test uses.
pub fn new_key_prefix() -> String {
    format!("test-{}", Uuid::now_v7().simple())
}

/// An HTTP client for the service under test that drops pooled connections after two idle
/// seconds, well inside the server's five-second keep-alive: a request sent on a connection the
/// server is closing at that moment fails with `IncompleteMessage` instead of being answered.
pub fn http_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder().timeout(timeout).pool_idle_timeout(Duration::from_secs(2)).build().unwrap()
}

/// Waits until `count` reaches `n` (a storm's purchases, say), failing after `limit`: a storm
/// that stalls below it fails the test instead of hanging the run.
pub async fn wait_for_count(count: &std::sync::atomic::AtomicUsize, n: usize, limit: Duration, what: &str) {
    let until = std::time::Instant::now() + limit;
    while count.load(std::sync::atomic::Ordering::Relaxed) < n {
        assert!(std::time::Instant::now() < until, "{what} never reached {n} in {limit:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Runs `command` to its end and returns what it printed, failing the test (and killing it) if it
/// runs past `limit`: a CLI call that hangs fails its test instead of holding the run.
pub async fn output_within(mut command: tokio::process::Command, limit: Duration) -> std::process::Output {
    let run = command.kill_on_drop(true).output();
    tokio::time::timeout(limit, run).await.unwrap_or_else(|_| panic!("{command:?} ran past {limit:?}")).unwrap()
}

/// A unique sale id for one test.
pub fn new_sale_id() -> String {
    format!("sale-{}", Uuid::now_v7().simple())
}

/// Talks to a running service (in-process or a child process) and to its Redis and Postgres.
pub struct Probe {
    /// `http://host:port`
    pub address: String,
    pub client: reqwest::Client,
    pub pool: PgPool,
    pub redis: RedisConnection,
    pub store: Sales,
}

impl Probe {
    /// A probe for the service at `address` using that database and key prefix.
    pub fn new(address: String, database_url: &str, key_prefix: &str) -> Self {
        Self::on_redis(address, database_url, key_prefix, &redis_url())
    }

    /// The same, for a service on the Redis (server or cluster seeds) at `redis_url`.
    pub fn on_redis(address: String, database_url: &str, key_prefix: &str, redis_url: &str) -> Self {
        let pool = seckill::db::connect_lazy(&SecretString::from(database_url.to_owned()), 5).unwrap();
        let redis =
            seckill::redis::connection::connect(&SecretString::from(redis_url.to_owned()), Duration::from_secs(5))
                .unwrap();
        let store = Sales::new(Keyspace::new(redis.clone(), key_prefix.to_owned()));
        let client = http_client(Duration::from_secs(20));
        Self { address, client, pool, redis, store }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    pub async fn buy(&self, sale_id: &str, user_id: &str) -> reqwest::Response {
        self.client.post(self.url("/buy")).json(&json!({"sale_id": sale_id, "user_id": user_id})).send().await.unwrap()
    }

    pub async fn seed(&self, sale_id: &str, body: Value) -> reqwest::Response {
        self.client
            .put(self.url(&format!("/admin/sales/{sale_id}")))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Seeds a sale open now with `stock`, asserting it worked.
    pub async fn seed_stock(&self, sale_id: &str, stock: i64) {
        let response = self.seed(sale_id, json!({"stock": stock})).await;
        assert_eq!(response.status(), 200, "seeding {sale_id}: {}", response.text().await.unwrap());
    }

    pub async fn status(&self, sale_id: &str) -> SaleStatus {
        let response = self
            .client
            .get(self.url(&format!("/admin/sales/{sale_id}")))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    /// `stock_initial` of the sale's row in the Postgres `sales` table.
    pub async fn sales_row_stock(&self, sale_id: &str) -> i64 {
        sqlx::query_scalar("select stock_initial from sales where sale_id = $1")
            .bind(sale_id)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// User ids of the sale's orders in Postgres, with how many orders each has.
    pub async fn order_users(&self, sale_id: &str) -> Vec<(String, i64)> {
        sqlx::query_as("select user_id, count(*) from orders where sale_id = $1 group by user_id order by user_id")
            .bind(sale_id)
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }

    pub async fn order_ids(&self, sale_id: &str) -> BTreeSet<Uuid> {
        sqlx::query_scalar("select order_id from orders where sale_id = $1")
            .bind(sale_id)
            .fetch_all(&self.pool)
            .await
            .unwrap()
            .into_iter()
            .collect()
    }

    /// Waits (up to 20 s) until the worker has committed every queued order of the sale.
    pub async fn wait_for_drain(&self, sale_id: &str) -> SaleStatus {
        self.wait_for_drain_within(sale_id, Duration::from_secs(20)).await
    }

    /// Waits up to `limit` until the worker has committed every queued order of the sale.
    pub async fn wait_for_drain_within(&self, sale_id: &str, limit: Duration) -> SaleStatus {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let status = self.status(sale_id).await;
            if status.queued == 0 && status.persisted == Some(status.sold) {
                return status;
            }
            assert!(tokio::time::Instant::now() < until, "queue did not drain: {status:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The promises every run must keep, checked once the queue has drained:
    /// (a) stock_initial = stock_left + units_sold and stock_left >= 0, the units in Postgres
    /// the units sold; (b) at most one order per user;
    /// (c) every order id the clients were told about is in Postgres exactly once;
    /// (d) the Redis buyer set and the Postgres orders hold the same users.
    pub async fn assert_invariants(&self, sale_id: &str, confirmed: &BTreeSet<Uuid>) -> SaleStatus {
        let status = self.wait_for_drain(sale_id).await;
        let units = status.units_sold - status.units_released;
        assert_eq!(status.stock_initial, status.stock_left + units, "(a) stock accounting in units: {status:?}");
        assert!(status.stock_left >= 0, "(a) negative stock: {status:?}");
        assert!(status.units_sold >= status.sold, "(a) an order holds at least one unit: {status:?}");
        let stored_units: i64 = sqlx::query_scalar(
            "select coalesce(sum(quantity), 0)::int8 from orders where sale_id = $1
             and not (status in ('cancelled', 'expired') or (status = 'refunded' and refund_restock))",
        )
        .bind(sale_id)
        .fetch_one(&self.pool)
        .await
        .unwrap();
        assert_eq!(stored_units, units, "(a) the units in Postgres are the units sold: {status:?}");
        let users = self.order_users(sale_id).await;
        assert!(users.iter().all(|(_, n)| *n == 1), "(b) a user has several orders: {users:?}");
        let stored = self.order_ids(sale_id).await;
        let missing: Vec<_> = confirmed.difference(&stored).collect();
        assert!(missing.is_empty(), "(c) confirmed orders missing from Postgres: {missing:?}");
        let buyers = self.buyers(sale_id).await;
        let persisted: BTreeSet<String> = users.into_iter().map(|(u, _)| u).collect();
        assert_eq!(buyers, persisted, "(d) Redis buyers and Postgres orders differ");
        status
    }

    /// Sends a payment event for `order_id`, signed with [`PAYMENT_SECRET`].
    pub async fn pay(&self, sale_id: &str, order_id: &str, event_id: &str) -> reqwest::Response {
        let body = json!({"id": event_id, "type": "order.paid", "sale_id": sale_id, "order_id": order_id}).to_string();
        self.payment_event(body, None).await
    }

    /// Posts `body` to `/payments/events`, signed with [`PAYMENT_SECRET`] at `at` (Unix
    /// seconds; default now).
    pub async fn payment_event(&self, body: String, at: Option<i64>) -> reqwest::Response {
        let at = at.unwrap_or_else(|| time::OffsetDateTime::now_utc().unix_timestamp());
        let signature = seckill::reservations::signature::sign(body.as_bytes(), PAYMENT_SECRET.as_bytes(), at);
        self.client
            .post(self.url("/payments/events"))
            .header("content-type", "application/json")
            .header("Seckill-Signature", signature)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// `GET path?user_id=user_id` (a buyer's read under `SECKILL_AUTH=none`), its JSON body.
    pub async fn get_as(&self, path: &str, user_id: &str) -> Value {
        let response = self.client.get(self.url(path)).query(&[("user_id", user_id)]).send().await.unwrap();
        response.json().await.unwrap()
    }

    /// `DELETE /sales/{sale_id}/order` for `user_id` (under `SECKILL_AUTH=none`).
    pub async fn cancel(&self, sale_id: &str, user_id: &str) -> reqwest::Response {
        self.client
            .delete(self.url(&format!("/sales/{sale_id}/order")))
            .query(&[("user_id", user_id)])
            .send()
            .await
            .unwrap()
    }

    /// The sale's orders in Postgres by status, and how many releases are still owed.
    pub async fn standings(&self, sale_id: &str) -> Standings {
        // Grouped by status and whether the order gives its units back (a refund only with restock).
        let rows: Vec<(String, bool, i64, i64, i64)> = sqlx::query_as(&format!(
            "select status, {RETURNS_UNITS}, count(*), count(*) filter (where restocked_at is null),
                    sum(quantity)::int8
             from orders where sale_id = $1 group by 1, 2"
        ))
        .bind(sale_id)
        .fetch_all(&self.pool)
        .await
        .unwrap();
        let mut standings = Standings::default();
        for (status, returns, count, not_back, units) in rows {
            if returns {
                standings.owed += not_back;
                standings.released += count;
                standings.released_units += units;
            } else {
                standings.live_units += units;
            }
            match status.as_str() {
                "confirmed" => standings.confirmed = count,
                "reserved" => standings.reserved = count,
                "paid" => standings.paid = count,
                "cancelled" => standings.cancelled = count,
                "expired" => standings.expired = count,
                "refunded" => standings.refunded += count,
                other => panic!("status {other}"),
            }
        }
        standings
    }

    /// Waits (up to `limit`) until the queue has drained, no reservation is open and no
    /// release is owed, then checks the reservations' promises in units: stock_initial = stock_left +
    /// reserved + paid + confirmed + refunded-not-restocked in Postgres and = stock_left + sold - released in Redis,
    /// stock_left >= 0 and never above stock_initial, every released order in the released set
    /// once, the buyers and the orders the same users.
    pub async fn assert_settled(&self, sale_id: &str, limit: Duration) -> (SaleStatus, Standings) {
        self.settle(sale_id, limit, false).await
    }

    /// [`Probe::assert_settled`], with reservations still open.
    pub async fn assert_released(&self, sale_id: &str, limit: Duration) -> (SaleStatus, Standings) {
        self.settle(sale_id, limit, true).await
    }

    async fn settle(&self, sale_id: &str, limit: Duration, open: bool) -> (SaleStatus, Standings) {
        let until = tokio::time::Instant::now() + limit;
        let (status, standings) = loop {
            // Postgres, Redis, Postgres again: the figures agree only if no transition happened
            // in between (each one changes Postgres before Redis).
            let before = self.standings(sale_id).await;
            let status = self.status(sale_id).await;
            let standings = self.standings(sale_id).await;
            let drained = before == standings && status.queued == 0 && status.persisted == Some(status.sold);
            if drained && (open || standings.reserved == 0) && standings.owed == 0 {
                break (status, standings);
            }
            assert!(tokio::time::Instant::now() < until, "not settled: {status:?} {standings:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        self.assert_balanced(sale_id, &status, &standings).await;
        (status, standings)
    }

    /// The promises of [`Probe::assert_settled`] on a settled sale's figures.
    pub async fn assert_balanced(&self, sale_id: &str, status: &SaleStatus, standings: &Standings) {
        let live = standings.live_units;
        assert_eq!(status.stock_initial, status.stock_left + live, "Postgres accounting: {status:?} {standings:?}");
        assert_eq!(
            status.stock_initial,
            status.stock_left + status.units_sold - status.units_released,
            "Redis accounting: {status:?}"
        );
        assert_eq!(status.units_released, standings.released_units, "units released: {status:?} {standings:?}");
        assert!(status.stock_left >= 0 && status.stock_left <= status.stock_initial, "stock out of bounds: {status:?}");
        assert_eq!(status.released, standings.released, "each release once: {status:?} {standings:?}");
        let released = self.store.keyspace().sale_keys(&SaleId::parse(sale_id).unwrap()).released;
        let gate: BTreeSet<String> = redis::AsyncCommands::smembers(&mut self.redis.clone(), &released).await.unwrap();
        let stored: BTreeSet<String> = sqlx::query_scalar::<_, Uuid>(&format!(
            "select order_id from orders where sale_id = $1 and {RETURNS_UNITS}"
        ))
        .bind(sale_id)
        .fetch_all(&self.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|id| id.to_string())
        .collect();
        assert_eq!(gate, stored, "the released set holds exactly the released orders");
        let users: BTreeSet<String> = self.order_users(sale_id).await.into_iter().map(|(u, _)| u).collect();
        assert_eq!(self.buyers(sale_id).await, users, "Redis buyers and Postgres orders differ");
    }

    /// The Redis buyer set of the sale.
    pub async fn buyers(&self, sale_id: &str) -> BTreeSet<String> {
        self.store.scan_buyers(&SaleId::parse(sale_id).unwrap()).await.unwrap().into_iter().collect()
    }

    /// The sale's stream key and the consumer group, for tests that read it by hand.
    pub fn orders_stream(&self, sale_id: &str) -> (String, &'static str) {
        (self.store.keyspace().sale_keys(&SaleId::parse(sale_id).unwrap()).orders, CONSUMER_GROUP)
    }
}

/// A sale's orders in Postgres by status, and the releases still owed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Standings {
    pub confirmed: i64,
    pub reserved: i64,
    pub paid: i64,
    pub cancelled: i64,
    pub expired: i64,
    /// Paid orders an operator refunded (with restock or without).
    pub refunded: i64,
    /// Orders that give their units back whose units are not back yet.
    pub owed: i64,
    /// Orders that give their units back: cancelled, expired, refunded with restock.
    pub released: i64,
    /// Units of the orders that hold them: confirmed, reserved, paid, refunded without restock.
    pub live_units: i64,
    /// Units of the orders that give them back.
    pub released_units: i64,
}

/// SQL true for an order that gives its units back (as `seckill::db`'s own predicate).
pub const RETURNS_UNITS: &str = "(status in ('cancelled', 'expired') or (status = 'refunded' and refund_restock))";

/// Reads an error body and checks its shape: `{"error": code, "message": non-empty}`.
pub async fn assert_error(response: reqwest::Response, status: u16, code: &str) {
    assert_eq!(response.status(), status, "expected {status} {code}");
    let body: Value = response.json().await.expect("error body is JSON");
    assert_eq!(body["error"], code, "body: {body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "body: {body}");
}
