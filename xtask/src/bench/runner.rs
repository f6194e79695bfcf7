//! One bench run in progress: its servers and binary, the apps started and stopped per row set,
//! its measured wrk and redis-benchmark rows and invariant checks, and what the rows share (the
//! high rate limit, a sale's keys, the warm-up).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use testbed::{App, Services};

use super::Args;
use super::model::Results;
use crate::measure::checks::{psql, reconcile};
use crate::measure::cpu::{Watch, wait_quiet};
use crate::measure::process;
use crate::measure::stats::group;
use crate::measure::wrk::{Mode, RedisBench, Wrk, WrkOut};
use seckill::domain::SaleId;
use seckill::redis::keys::SaleKeys;

/// One bench run in progress.
pub struct Bench {
    pub args: Args,
    pub services: Services,
    pub binary: PathBuf,
    pub repo: PathBuf,
    pub results: Results,
    /// The app's base environment (prefix, log filter, batch), before each row set's own.
    pub base_env: Vec<(String, String)>,
}

impl Bench {
    /// The processes each row accounts for: Redis, Postgres (and its backends), the app.
    pub fn watch(&self, app: Option<&App>) -> Vec<Watch> {
        let mut watch = vec![];
        watch.extend(self.services.redis.pid().map(|p| Watch::process("redis", p)));
        watch.extend(self.services.postgres.pid().map(|p| Watch::tree("postgres", p)));
        watch.extend(app.map(|a| Watch::process("seckill", a.pid())));
        watch
    }

    pub fn raw(&self) -> &Path {
        &self.results.raw
    }

    /// Starts `seckill serve` with the base environment and `env` on top.
    pub fn start_app(&self, env: &[(&str, &str)]) -> anyhow::Result<App> {
        let mut all: Vec<(&str, &str)> = self.base_env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        all.extend_from_slice(env);
        App::start(&self.services, &self.binary, &all)
    }

    /// Stops the app and keeps its log with the raw outputs; its peak resident memory (VmHWM)
    /// goes into `setting.app_peak_memory`, one entry per app in the order they ran.
    pub fn stop_app(&mut self, mut app: App) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", app.pid())).unwrap_or_default();
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
        if let (Some(kib), Some(name)) = (kib, app.log.file_stem()) {
            let entry = format!("{} {} MiB", name.to_string_lossy(), kib.div_ceil(1024));
            let all = match self.results.meta("setting.app_peak_memory") {
                Some(before) => format!("{before}, {entry}"),
                None => entry,
            };
            self.results.set("setting.app_peak_memory", all);
        }
        app.stop();
        if let Some(name) = app.log.file_name() {
            let _ = std::fs::copy(&app.log, self.raw().join(name));
        }
    }

    pub fn seed(&self, app: &App, sale: &str, stock: u64) -> anyhow::Result<()> {
        eprintln!("==> seed sale {sale} (stock {stock})");
        app.seed(sale, stock, None).with_context(|| format!("seeding {sale}"))?;
        Ok(())
    }

    /// With --quiet-wait, waits (bounded) until the machine is nearly idle.
    pub fn wait_quiet(&self) {
        if self.args.quiet_wait > 0 {
            let (busy, quiet) = wait_quiet(Duration::from_secs(self.args.quiet_wait), 0.3);
            if !quiet {
                eprintln!(
                    "==> the machine is still busy ({busy:.2} cores) after {} s; running anyway",
                    self.args.quiet_wait
                );
            }
        }
    }

    /// One measured wrk row against `app`.
    pub fn wrk(
        &mut self,
        name: &str,
        app: &App,
        seconds: u64,
        connections: u32,
        mode: Mode,
        rate: Option<u64>,
    ) -> anyhow::Result<WrkOut> {
        self.wait_quiet();
        let w = Wrk { threads: self.args.threads, connections, seconds, url: &app.url, mode, rate };
        let cmd = w.command(&self.repo);
        eprintln!("==> {name}: {}", process::argv(&cmd)[1..].join(" "));
        let run = process::run(name, cmd, Duration::from_secs(seconds + 30), &self.watch(Some(app)), self.raw())?;
        let out = WrkOut::parse(&run.stdout).with_context(|| format!("{name}: no BENCH_WRK line in wrk's output"))?;
        eprintln!(
            "    {} req/s, p99 {:.2} ms, statuses {:?}",
            group(out.rate()),
            out.latency_us.p99 / 1000.0,
            out.statuses
        );
        self.results.wrk.insert(name.into(), run);
        Ok(out)
    }

    /// One measured redis-benchmark row (EVALSHA ...) with `count` calls over keyspace `-r`.
    pub fn rbench(
        &mut self,
        name: &str,
        count: u64,
        keyspace: u64,
        args: &[&str],
        app: Option<&App>,
    ) -> anyhow::Result<RedisBench> {
        self.wait_quiet();
        let mut cmd = Command::new("redis-benchmark");
        cmd.args(["-h", "127.0.0.1", "-p", &self.services.redis.port.to_string(), "-c", "50"])
            .args(["-n", &count.to_string(), "-r", &keyspace.to_string(), "--csv"])
            .args(args);
        eprintln!("==> {name}: redis-benchmark -n {count} -r {keyspace} {}", args.join(" "));
        self.results.set(format!("{name}.count"), count);
        let run = process::run(name, cmd, Duration::from_secs(120), &self.watch(app), self.raw())?;
        let out =
            RedisBench::parse(&run.stdout).with_context(|| format!("{name}: no CSV result from redis-benchmark"))?;
        eprintln!("    {} ops/s, p99 {:?} ms", group(out.rate), out.p99_ms);
        self.results.redis.insert(name.into(), run);
        Ok(out)
    }

    /// Once the queue drained, `seckill reconcile SALE`; records its exit code and JSON report.
    pub fn check(&mut self, app: &App, sale: &str) -> anyhow::Result<()> {
        eprintln!("==> check invariants of {sale}");
        let (rc, stdout, report) = reconcile(app, sale)?;
        std::fs::write(self.raw().join(format!("check-{sale}.out")), stdout)?;
        self.results.checks.push((sale.into(), rc, report));
        Ok(())
    }

    /// One command on the single Redis.
    pub fn redis<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> anyhow::Result<T> {
        self.services.redis.query(cmd)
    }

    /// One query on the `seckill` database through psql (its single value).
    pub fn psql(&self, sql: &str) -> anyhow::Result<String> {
        psql(&self.services, sql)
    }
}

/// Far above what one address sends (REQUESTS × WINDOW in µs must stay below 2^50): the in-stock
/// rows' limiter runs on every request but never refuses.
pub(super) const HIGH_RATE_LIMIT: &str = "100000/1s";

/// The keys of `sale` under the apps' prefix.
pub(super) fn keys(b: &Bench, sale: &str) -> SaleKeys {
    SaleKeys::new(&b.args.key_prefix, &SaleId::parse(sale).expect("a valid sale id"))
}

/// One second of GET /healthz against a freshly started app (not reported).
pub(super) fn warm_up(b: &mut Bench, app: &testbed::App, name: &str) -> anyhow::Result<()> {
    b.wrk(&format!("warmup-{name}"), app, 1, b.args.connections, Mode::Healthz, None)?;
    b.results.wrk.remove(&format!("warmup-{name}"));
    Ok(())
}
