//! Real processes under test: the `seckill` binary as a child process, and the throwaway
//! redis-server and Postgres that `cargo xtask test` started, which these tests stop and restart
//! through their `testbed` handles.

use std::ops::Deref;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::{Mutex, MutexGuard};
use tokio::time::Instant;

use testbed::{Signal, free_port};

use crate::common::{self, ADMIN_TOKEN, Probe};

/// The HS256 secret of the deployments that run with `SECKILL_AUTH=jwt` ([`JWT_ENV`]).
pub const JWT_SECRET: &str = "faults-test-secret-of-at-least-32-bytes";
/// The settings of a `SECKILL_AUTH=jwt` deployment.
pub const JWT_ENV: [(&str, &str); 2] = [("SECKILL_AUTH", "jwt"), ("SECKILL_JWT_SECRET", JWT_SECRET)];

/// Held by every deployment: the tests of this binary stop the shared servers or load the
/// machine, so they run one at a time (tokio's mutex is not poisoned by a failed test).
static SERIAL: Mutex<()> = Mutex::const_new(());

/// One deployment of the service: its own database, key prefix and port, which the processes
/// started from it share (so a restarted process picks up where the last one stopped).
pub struct Deployment {
    _serial: MutexGuard<'static, ()>,
    probe: Probe,
    pub database_url: String,
    pub redis_url: String,
    pub key_prefix: String,
    pub port: u16,
    env: Vec<(String, String)>,
    starts: usize,
}

impl Deref for Deployment {
    type Target = Probe;

    fn deref(&self) -> &Probe {
        &self.probe
    }
}

impl Deployment {
    /// A fresh deployment, once no other test of this binary runs; `env` adds or overrides
    /// `SECKILL_*` settings of its processes.
    pub async fn new(env: &[(&str, &str)]) -> Self {
        Self::on_redis(&common::redis_url(), env).await
    }

    /// The same, on the Redis (one server, or a cluster's seed nodes) at `redis_url`.
    pub async fn on_redis(redis_url: &str, env: &[(&str, &str)]) -> Self {
        let serial = SERIAL.lock().await;
        let database_url = common::create_database().await;
        let key_prefix = common::new_key_prefix();
        let port = free_port();
        let probe = Probe::on_redis(format!("http://127.0.0.1:{port}"), &database_url, &key_prefix, redis_url);
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let redis_url = redis_url.to_owned();
        Self { _serial: serial, probe, database_url, redis_url, key_prefix, port, env, starts: 0 }
    }

    /// The environment every process of this deployment gets.
    fn process_env(&self) -> Vec<(String, String)> {
        let mut vars: Vec<(String, String)> = [
            ("SECKILL_LISTEN", format!("127.0.0.1:{}", self.port)),
            ("SECKILL_REDIS_URL", self.redis_url.clone()),
            ("SECKILL_DATABASE_URL", self.database_url.clone()),
            ("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            ("SECKILL_KEY_PREFIX", self.key_prefix.clone()),
            ("SECKILL_RATE_LIMIT", "1000000/1s".to_owned()),
            ("SECKILL_WORKER_BLOCK", "200ms".to_owned()),
            ("SECKILL_SHUTDOWN_TIMEOUT", "20s".to_owned()),
            ("RUST_LOG", "info,sqlx=warn".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        vars.extend(self.env.iter().cloned());
        vars
    }

    /// Waits (up to 20 s, else fails with `why`) until a session of the deployment's database
    /// waits on a lock.
    pub async fn wait_for_a_lock_waiter(&self, why: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
            )
            .fetch_one(&self.pool)
            .await
            .unwrap();
            if waiting > 0 {
                return;
            }
            assert!(Instant::now() < until, "{why}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Starts `seckill serve` and seeds a new sale open now with `stock`.
    pub async fn start_with_sale(&mut self, stock: i64) -> (Seckill, String) {
        let service = self.start().await;
        let sale = common::new_sale_id();
        self.seed_stock(&sale, stock).await;
        (service, sale)
    }

    /// Starts `seckill serve` on the deployment's port and waits until it answers `/healthz`.
    pub async fn start(&mut self) -> Seckill {
        self.start_process(self.port, &[]).await
    }

    /// The same, with `env` on top of the deployment's settings.
    pub async fn start_with(&mut self, env: &[(&str, &str)]) -> Seckill {
        self.start_process(self.port, env).await
    }

    /// Starts one more `seckill serve` of this deployment, on a port of its own, with `env` on
    /// top of the deployment's settings.
    pub async fn start_instance(&mut self, env: &[(&str, &str)]) -> Seckill {
        self.start_process(free_port(), env).await
    }

    /// Starts `seckill serve` on the deployment's port, able to open at most `nofile` files
    /// (sockets included), with `env` on top of the deployment's settings.
    pub async fn start_with_nofile(&mut self, nofile: u64, env: &[(&str, &str)]) -> Seckill {
        let mut command = Command::new("prlimit");
        command.arg(format!("--nofile={nofile}:{nofile}")).arg(env!("CARGO_BIN_EXE_seckill"));
        self.start_command(command, self.port, env).await
    }

    async fn start_process(&mut self, port: u16, env: &[(&str, &str)]) -> Seckill {
        self.start_command(Command::new(env!("CARGO_BIN_EXE_seckill")), port, env).await
    }

    /// Runs `command` (the binary, or a wrapper that execs it in its own process) with `serve`.
    async fn start_command(&mut self, mut command: Command, port: u16, env: &[(&str, &str)]) -> Seckill {
        self.starts += 1;
        let address = format!("http://127.0.0.1:{port}");
        let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{}.log", self.key_prefix, self.starts));
        let child = command
            .arg("serve")
            .envs(self.process_env())
            .env("SECKILL_LISTEN", format!("127.0.0.1:{port}"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(&log).unwrap().try_clone().unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the seckill binary");
        let mut process = Seckill { child, log, address };
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let health = format!("{}/healthz", process.address);
            if let Ok(r) = self.client.get(health).timeout(Duration::from_secs(1)).send().await
                && r.status() == 200
            {
                return process;
            }
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!("seckill exited at start ({status}); log:\n{}", process.log_text());
            }
            assert!(Instant::now() < until, "seckill did not come up; log:\n{}", process.log_text());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A running `seckill serve` process; killed if dropped while running. Dropping it also checks
/// that the process never panicked, whatever the test did to it.
pub struct Seckill {
    child: Child,
    pub log: PathBuf,
    /// `http://127.0.0.1:<port>`
    pub address: String,
}

impl Drop for Seckill {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let panics = self.log_lines("panicked");
            assert_eq!(panics, 0, "seckill panicked; log: {}", self.log.display());
        }
    }
}

impl Seckill {
    pub fn pid(&self) -> u32 {
        self.child.id().expect("process is running")
    }

    /// SIGKILL: the process gets no chance to finish anything.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("SIGKILL seckill");
    }

    /// SIGTERM: asks for a graceful shutdown.
    pub fn terminate(&self) {
        assert!(testbed::signal_pid(self.pid(), Signal::SIGTERM), "SIGTERM seckill");
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self, limit: Duration) -> ExitStatus {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!("seckill still running after {limit:?}; log:\n{}", self.log_text()),
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log has a line containing `needle` (20 s at most), e.g. the last line of
    /// the start ("worker started", which the worker's task logs after `/healthz` answers).
    pub async fn wait_for_log(&self, needle: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        while self.log_lines(needle) == 0 {
            assert!(Instant::now() < until, "no log line with {needle:?}; log:\n{}", self.log_text());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Log lines containing `needle`.
    pub fn log_lines(&self, needle: &str) -> usize {
        self.log_text().lines().filter(|l| l.contains(needle)).count()
    }

    /// CPU time (user + system) the process has used so far, from /proc.
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let hz = String::from_utf8(std::process::Command::new("getconf").arg("CLK_TCK").output().unwrap().stdout)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap();
        Duration::from_millis(ticks * 1000 / hz)
    }
}

/// The test Postgres is stopped (fast shutdown) while this lives; it is started again by `end` or
/// on drop (so a failing test does not leave it down for the next one).
pub struct PostgresOutage {
    ended: bool,
}

fn start_postgres() {
    common::testbed().postgres.start().expect("restarting the test Postgres");
}

impl PostgresOutage {
    pub fn begin() -> Self {
        assert!(common::testbed().postgres.stop(), "the test Postgres did not stop (fast shutdown)");
        Self { ended: false }
    }

    pub fn end(mut self) {
        self.ended = true;
        start_postgres();
    }
}

impl Drop for PostgresOutage {
    fn drop(&mut self) {
        if !self.ended {
            start_postgres();
        }
    }
}

/// The test redis-server is shut down (SIGTERM: a clean shutdown that flushes the AOF) while
/// this lives, and started again from its config file (same port, same AOF) by `end` or on drop.
pub struct RedisOutage {
    ended: bool,
}

fn start_redis() {
    common::testbed().redis.start().expect("restarting the test redis-server");
}

impl RedisOutage {
    pub fn begin() -> Self {
        let redis = &common::testbed().redis;
        assert!(redis.pid().is_some(), "the test redis-server runs");
        assert!(redis.stop(), "the test redis-server did not exit on SIGTERM");
        Self { ended: false }
    }

    pub fn end(mut self) {
        self.ended = true;
        start_redis();
    }
}

impl Drop for RedisOutage {
    fn drop(&mut self) {
        if !self.ended {
            start_redis();
        }
    }
}
