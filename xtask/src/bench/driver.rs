//! The bench run's machinery: the servers and binary, apps started and stopped per row set,
//! measured wrk and redis-benchmark runs, invariant checks, and the report written at the end.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::Value;
use testbed::{App, Services};

use super::cpu::{Watch, wait_quiet};
use super::model::Results;
use super::wrk::{Mode, RedisBench, Wrk, WrkOut};
use super::{Args, measure};
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

/// A temp dir of our own for raw outputs: `$TMPDIR/seckill-bench.<pid>.<nanos>`.
pub fn raw_dir(what: &str) -> anyhow::Result<PathBuf> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.subsec_nanos();
    let dir = std::env::temp_dir().join(format!("seckill-{what}.{}.{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The first line of `cmd --version` (stdout or stderr), cut to `words` words.
pub fn version(cmd: &str, words: usize) -> String {
    let out = Command::new(cmd).arg("--version").output();
    let text = out.map(|o| if o.stdout.is_empty() { o.stderr } else { o.stdout }).unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .next()
        .unwrap_or("?")
        .split_whitespace()
        .take(words)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Fails unless every generator is on PATH (apt-get installs them when we are root).
pub fn need_tools(tools: &[(&str, &str)]) -> anyhow::Result<()> {
    for (tool, package) in tools {
        if Command::new("sh").args(["-c", &format!("command -v {tool}")]).output()?.status.success() {
            continue;
        }
        anyhow::ensure!(unsafe { libc::geteuid() } == 0, "{tool} is missing (apt-get install {package})");
        eprintln!("==> installing {package}");
        let ok = Command::new("timeout")
            .args(["900", "apt-get", "install", "-y", "--no-install-recommends", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?
            .success();
        anyhow::ensure!(ok, "apt-get install {package} failed");
    }
    Ok(())
}

/// UTC now as 2026-11-23T02:59:58Z.
pub fn utc_now() -> String {
    rfc3339(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64)
}

/// Unix seconds as 2026-11-23T02:59:58Z (RFC 3339, UTC).
pub fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The machine's CPU model, cores, kernel and 1/5/15-minute load.
pub fn machine() -> (String, usize, String, String) {
    let cpu =
        procfs::CpuInfo::current().ok().and_then(|c| c.model_name(0).map(str::to_string)).unwrap_or("unknown".into());
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kernel = Command::new("uname")
        .arg("-sr")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let load = procfs::LoadAverage::current()
        .map(|l| format!("{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen))
        .unwrap_or_default();
    (cpu, nproc, kernel, load)
}

use procfs::Current;

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
        eprintln!("==> {name}: {}", measure::argv(&cmd)[1..].join(" "));
        let run = measure::run(name, cmd, Duration::from_secs(seconds + 30), &self.watch(Some(app)), self.raw())?;
        let out = WrkOut::parse(&run.stdout).with_context(|| format!("{name}: no BENCH_WRK line in wrk's output"))?;
        eprintln!(
            "    {} req/s, p99 {:.2} ms, statuses {:?}",
            super::model::group(out.rate()),
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
        let run = measure::run(name, cmd, Duration::from_secs(120), &self.watch(app), self.raw())?;
        let out =
            RedisBench::parse(&run.stdout).with_context(|| format!("{name}: no CSV result from redis-benchmark"))?;
        eprintln!("    {} ops/s, p99 {:?} ms", super::model::group(out.rate), out.p99_ms);
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

/// One query on the `seckill` database through psql: its rows, one a line, columns split by `|`.
pub fn psql(services: &Services, sql: &str) -> anyhow::Result<String> {
    let out = Command::new(&services.tools.psql)
        .args(["-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-d", &services.database_url(), "-c", sql])
        .output()?;
    anyhow::ensure!(out.status.success(), "psql: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Waits (up to 120 s) until the sale's queue is empty, so that an app is not stopped with a
/// batch of orders in flight.
pub fn drained(app: &App, sale: &str) {
    if !app.wait_drained(sale, Duration::from_secs(120)) {
        eprintln!("==> the queue of {sale} did not drain within 120 s");
    }
}

/// Once the sale's queue drained, `seckill reconcile SALE` with the app's settings: its exit
/// code (0: the promises hold), its output and its JSON report.
pub fn reconcile(app: &App, sale: &str) -> anyhow::Result<(i32, String, Option<Value>)> {
    drained(app, sale);
    let out = app.reconcile(sale)?;
    let (rc, stdout) = (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned());
    if rc != 0 {
        eprintln!("seckill reconcile {sale} exited {rc}:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    }
    let report = serde_json::from_str(&stdout).ok();
    Ok((rc, stdout, report))
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
