//! Test harness: the service runs in this process, on its own Postgres database and Redis key
//! prefix on the throwaway servers that `cargo xtask test` starts, with a server on a free port.

use std::ops::Deref;
use std::time::Duration;

use seckill::app::Application;
use seckill::config::Config;
use seckill::http::routes::SaleStatus;
use seckill::limiter::{Algorithm, RateLimit, Scope};
use seckill::orders::worker::{Worker, WorkerSettings};
use secrecy::{ExposeSecret, SecretString};
use tokio_util::sync::CancellationToken;

pub use crate::common::{ADMIN_TOKEN, Probe, assert_error, new_sale_id, redis_url};

/// A configuration pointing at the test servers, with a fresh database and key prefix.
pub async fn test_config() -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        redis_url: SecretString::from(redis_url()),
        database_url: SecretString::from(crate::common::create_database().await),
        admin_token: Some(SecretString::from(ADMIN_TOKEN)),
        rate_limit: RateLimit { limit: 100_000, window: Duration::from_secs(1) },
        user_rate_limit: Some(RateLimit { limit: 100_000, window: Duration::from_secs(1) }),
        ipv6_prefix: seckill::limiter::DEFAULT_IPV6_PREFIX,
        sold_out_rate_limit: Some(RateLimit { limit: 100_000, window: Duration::from_secs(1) }),
        sold_out_flag_ttl: seckill::purchase::sold_out::FLAG_TTL,
        rate_limit_algorithm: Algorithm::SlidingLog,
        rate_limit_burst: None,
        rate_limit_scope: Scope::default(),
        log_format: seckill::telemetry::LogFormat::Text,
        trusted_proxies: vec![],
        key_prefix: crate::common::new_key_prefix(),
        redis_timeout: Duration::from_secs(1),
        database_max_connections: 5,
        worker_batch: 100,
        worker_block: Duration::from_millis(100),
        worker_claim_timeout: Duration::from_secs(30),
        worker_consumer: Some("test-worker".into()),
        shutdown_timeout: Duration::from_secs(5),
        purchase_batch: seckill::purchase::batch::DEFAULT_PURCHASE_BATCH,
        http_workers: None,
        auth: Default::default(),
        operators: Default::default(),
        database: Default::default(),
        durability: Default::default(),
        retire: Default::default(),
        edge: Default::default(),
        payments: seckill::config::PaymentConfig {
            payment_window: None,
            payment_secret: Some(SecretString::from(crate::common::PAYMENT_SECRET)),
        },
        admission: Default::default(),
        webhooks: Default::default(),
        challenge: Default::default(),
    }
}

/// A running service under test; it derefs to a `Probe` of itself.
pub struct TestApp {
    pub probe: Probe,
    /// `http://<SECKILL_METRICS_LISTEN>`, when the config sets a metrics listener.
    pub metrics_address: Option<String>,
    pub config: Config,
    pub shutdown: CancellationToken,
    pub server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Deref for TestApp {
    type Target = Probe;

    fn deref(&self) -> &Probe {
        &self.probe
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Starts the service (with its worker) on a fresh database and key prefix.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}, true).await
}

/// A janitor that retires a sale 300 ms after it is over, looking every 200 ms (for `spawn_app_with`).
pub fn quick_janitor(config: &mut Config) {
    config.retire.retire_after = Duration::from_millis(300);
    config.retire.retire_interval = Duration::from_millis(200);
}

/// Starts the service after `tweak` adjusted the test configuration.
pub async fn spawn_app_with(tweak: impl FnOnce(&mut Config), run_worker: bool) -> TestApp {
    if std::env::var_os("TEST_LOG").is_some() {
        seckill::telemetry::init(seckill::telemetry::LogFormat::Text);
    }
    let mut config = test_config().await;
    tweak(&mut config);
    spawn_app_on(config, run_worker).await
}

/// A second instance of `app`'s deployment: same database, key prefix and settings.
pub async fn spawn_instance_of(app: &TestApp) -> TestApp {
    spawn_app_on(app.config.clone(), false).await
}

async fn spawn_app_on(config: Config, run_worker: bool) -> TestApp {
    let app = Application::build(&config, run_worker).await.expect("build app");
    let address = format!("http://{}", app.local_addr());
    let metrics_address = app.metrics_addr().map(|addr| format!("http://{addr}"));
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    let probe = Probe::new(address, config.database_url.expose_secret(), &config.key_prefix);
    TestApp { probe, metrics_address, config, shutdown, server }
}

impl TestApp {
    /// Runs a worker step by step until the sale's queue has drained into Postgres (an app
    /// spawned without its worker).
    pub async fn commit_by_hand(&self, sale: &str) -> SaleStatus {
        let mut worker = self.manual_worker("w", Duration::from_secs(30));
        for _ in 0..20 {
            worker.step().await.unwrap();
            let status = self.status(sale).await;
            if status.queued == 0 && status.persisted == Some(status.sold) {
                return status;
            }
        }
        panic!("the worker did not commit the sale's orders");
    }

    /// A worker on this app's database and prefix, driven step by step by the test.
    pub fn manual_worker(&self, consumer: &str, claim_timeout: Duration) -> Worker {
        self.manual_worker_batched(consumer, claim_timeout, 100)
    }

    /// [`Self::manual_worker`] reading `batch` entries a step, inserting `batch` orders a statement.
    pub fn manual_worker_batched(&self, consumer: &str, claim_timeout: Duration, batch: usize) -> Worker {
        let redis = seckill::redis::connection::connect(&self.config.redis_url, Duration::from_secs(5)).unwrap();
        Worker::new(
            redis,
            self.pool.clone(),
            WorkerSettings {
                key_prefix: self.config.key_prefix.clone(),
                consumer: consumer.into(),
                batch,
                block: Duration::from_millis(50),
                claim_timeout,
                insert_timeout: Duration::from_secs(15),
            },
            Default::default(),
        )
    }

    /// Waits (up to 20 s) until the sold-out flags hold `held` in memory (a flag weighs 1 and
    /// each buyer copied with it 1): `seckill_sold_out_held` on `/metrics`.
    pub async fn wait_for_sold_out_held(&self, held: f64) {
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let text = self.client.get(self.url("/metrics")).send().await.unwrap().text().await.unwrap();
            let now = crate::metrics::samples(&text)["seckill_sold_out_held"];
            if now == held {
                return;
            }
            assert!(tokio::time::Instant::now() < until, "the sold-out flags hold {now}, not {held}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Transactions the app's database committed or rolled back so far. A backend reports its counts
/// to `pg_stat_database` at the latest when it exits, so every backend on the database is ended
/// first (the app's pool connects again when it next needs to).
pub async fn transactions_of(app: &TestApp) -> i64 {
    use secrecy::ExposeSecret;
    use sqlx::Connection;
    let url = app.config.database_url.expose_secret().to_owned();
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    let mut conn = sqlx::PgConnection::connect(&crate::common::postgres_url()).await.unwrap();
    sqlx::query("select pg_terminate_backend(pid) from pg_stat_activity where datname = $1")
        .bind(&database)
        .execute(&mut conn)
        .await
        .unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    let on_it = "select count(*) from pg_stat_activity where datname = $1";
    while sqlx::query_scalar::<_, i64>(on_it).bind(&database).fetch_one(&mut conn).await.unwrap() > 0 {
        assert!(tokio::time::Instant::now() < until, "the backends on {database} did not exit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sqlx::query_scalar("select xact_commit + xact_rollback from pg_stat_database where datname = $1")
        .bind(&database)
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

/// A Redis server of the test's own (a testbed sibling, stopped when this is dropped), for a test
/// that holds its writes: `CLIENT PAUSE` holds every client of a server, other tests' too.
pub struct PrivateRedis(testbed::Redis);

impl PrivateRedis {
    pub fn start() -> Self {
        let dir = crate::common::testbed().dir().join(format!("private-{}", crate::common::new_key_prefix()));
        Self(crate::common::testbed().redis.launch_sibling(&dir).expect("start a private Redis"))
    }

    pub fn url(&self) -> String {
        self.0.url()
    }

    /// Holds every write (scripts that may write among them) for `ms` from now.
    pub async fn hold_writes(&self, ms: u64) {
        let mut con = redis::Client::open(self.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("WRITE").query_async(&mut con).await.unwrap();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Returns once `n` sessions of the pool's database wait on a lock.
pub async fn lock_waiters(pool: &sqlx::PgPool, n: i64) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if waiting >= n {
            return;
        }
        assert!(std::time::Instant::now() < until, "{waiting} of {n} sessions wait on a lock");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
