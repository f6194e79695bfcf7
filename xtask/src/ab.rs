//! `cargo xtask ab`: A/B two builds of seckill on the in-stock `POST /buy` path, alternating
//! runs so that the shared machine's drift hits both alike.
//!
//! Both builds serve their own sale (`serve`, worker in the process, SECKILL_RATE_LIMIT=1000000/1s,
//! key prefixes ab-a and ab-b, 10,000,000 items each) on one throwaway Redis and Postgres, each
//! build with a database of its own. Then `--rounds` times wrk (`load-tests/lib/wrk-bench.lua`,
//! every request a new user) runs `--duration` seconds against each, A first in odd rounds and B
//! first in even ones (the second run of a pair gained 3-7 % in either order), after both queues
//! have drained. It prints one line per run, each build's median req/s and app, Redis and
//! Postgres CPU µs per purchase with B / A, and B / A paired within each round (median and
//! range), which the drift between rounds disturbs less.
//!
//! `--rate-limited`: the same with SECKILL_RATE_LIMIT=10/1s, so almost every request is refused
//! (429, answered from the instance's memory): the path that should cost what `/healthz` does.
//! `--sold-out`: the sales are seeded with no stock, so every request is answered 410 (from the
//! instance's sold-out flag after the first). The figures of both are per request.
//! `--spread-clients`: every request from a new client address (`X-Forwarded-For` from 127.0.0.1,
//! which both apps trust as a proxy), so each purchase checks a client limit of its own.
//! `--redis-cores F`: Redis is held to F cores (a CPU cgroup, `measure::cgroup`; needs root), so
//! that on a small host Redis, not the app or wrk, is the limit (give wrk connections enough to
//! keep it busy, e.g. `--connections 256`): the batches then fill as on a big host, and the
//! summary's purchases per Redis CPU-second are one Redis thread's ceiling.
//! After the rounds, each build's sale must reconcile (`seckill reconcile`, its own binary).
//! `--rate N`: paced runs at N requests/s (latency at a given load, e.g. the light row's 1000/s).
//! Each run's line also gives the requests per script call (EVALSHA calls, `INFO commandstats`),
//! Redis's µs inside those calls per request, the orders per worker insert (its
//! `seckill_worker_batch_size` in `/metrics`, once the queue drained) and the app's context
//! switches per request (voluntary: its threads waited; involuntary: their core went to another
//! thread or process), and a second line Redis's µs per request by command and outside script
//! calls.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use testbed::{App, Options, Services};

use crate::measure::cgroup::CpuCap;
use crate::measure::checks::reconcile;
use crate::measure::commandstats::CommandStats;
use crate::measure::cpu::{Watch, switches};
use crate::measure::host::{need_tools, raw_dir};
use crate::measure::process;
use crate::measure::settings::{Profile, setting};
use crate::measure::stats::{group, median, median_and_range};
use crate::measure::wrk::{Mode, Wrk, WrkOut};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Build A: a git revision (built in a copy of that tree; target/ab holds the builds).
    #[arg(long, required_unless_present = "a_bin", conflicts_with = "a_bin")]
    a: Option<String>,
    /// Build B: a git revision.
    #[arg(long, required_unless_present = "b_bin", conflicts_with = "b_bin")]
    b: Option<String>,
    /// Build A as an existing seckill binary instead of a revision.
    #[arg(long)]
    a_bin: Option<PathBuf>,
    /// Build B as an existing seckill binary instead of a revision.
    #[arg(long)]
    b_bin: Option<PathBuf>,
    /// A setting of A's app, `NAME=VALUE` (repeatable): with the same build for both, a paired
    /// A/B of two settings (e.g. `--a-env SECKILL_HTTP_WORKERS=2 --b-env SECKILL_HTTP_WORKERS=16`).
    #[arg(long, value_parser = setting)]
    a_env: Vec<(String, String)>,
    /// A setting of B's app, `NAME=VALUE` (repeatable).
    #[arg(long, value_parser = setting)]
    b_env: Vec<(String, String)>,
    /// Rounds: one run of each build per round.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Seconds per run.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
    duration: u64,
    /// wrk threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
    /// wrk connections.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    connections: u32,
    /// Which build profile the revisions are built with.
    #[arg(long, value_enum, default_value_t = Profile::Release)]
    profile: Profile,
    /// Measure the rate-limited path instead (SECKILL_RATE_LIMIT=10/1s: nearly every request 429).
    #[arg(long)]
    rate_limited: bool,
    /// Paced runs at this many requests per second in all (wrk's schedule), for latency at a
    /// given load (e.g. 1000: the light row's p50) rather than the saturated cost.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    rate: Option<u64>,
    /// Measure the sold-out path instead (stock 0: every request 410).
    #[arg(long, conflicts_with = "rate_limited")]
    sold_out: bool,
    /// Every request from a new client address (X-Forwarded-For behind a trusted proxy), not all
    /// from 127.0.0.1.
    #[arg(long)]
    spread_clients: bool,
    /// Hold Redis to this many cores (a CPU cgroup; root only), so that Redis is the limit.
    #[arg(long, value_parser = cores)]
    redis_cores: Option<f64>,
}

fn cores(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(c) if (0.01..=64.0).contains(&c) => Ok(c),
        _ => Err("a number of cores from 0.01 to 64".into()),
    }
}

/// `git archive REV` into a temp dir, `cargo build` there with target/ab as the target dir,
/// and the binary copied out to `<raw>/seckill-<name>`.
fn build_rev(rev: &str, name: &str, profile: Profile, raw: &Path) -> anyhow::Result<PathBuf> {
    let root = testbed::workspace_root();
    let tree = raw.join(format!("src-{name}"));
    std::fs::create_dir_all(&tree)?;
    let status = Command::new("sh")
        .arg("-c")
        .arg("git -C \"$1\" archive --format=tar \"$2\" | tar -x -C \"$3\"")
        .args(["sh", &root.display().to_string(), rev, &tree.display().to_string()])
        .status()?;
    ensure!(status.success(), "git archive {rev} failed");
    let target = root.join("target/ab");
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(["build", "--locked", "--package", "seckill", "--bin", "seckill"])
        .current_dir(&tree)
        .env("CARGO_TARGET_DIR", &target);
    if matches!(profile, Profile::Release) {
        cmd.arg("--release");
    }
    eprintln!("==> ab: building {rev} ({name}) in {}", tree.display());
    ensure!(cmd.status()?.success(), "building {rev} failed");
    let binary = raw.join(format!("seckill-{name}"));
    let built = target.join(if matches!(profile, Profile::Release) { "release" } else { "debug" }).join("seckill");
    std::fs::copy(&built, &binary).with_context(|| format!("copying {}", built.display()))?;
    Ok(binary)
}

/// What each run's CPU is split into, by watch label and name: the app, then the Redis and Postgres both builds share
/// (only the build under load uses them; its queue drains within the run's first milliseconds
/// after it ends, which the run's seconds dwarf).
const PARTS: [(&str, &str); 3] = [("seckill", "app"), ("redis", "Redis"), ("postgres", "Postgres")];

/// One run: which build, round, req/s, CPU µs per request of each of `PARTS`, 201s, requests.
struct Sample {
    build: usize,
    round: u32,
    rate: f64,
    cpu_us: [f64; 3],
    created: u64,
    requests: u64,
}

/// The orders the app's worker has written to Postgres so far, and in how many inserts
/// (`seckill_worker_batch_size`'s sum and count).
fn worker_inserts(app: &App) -> anyhow::Result<(f64, f64)> {
    let metric = |sample| crate::measure::http::metric(app.port, sample);
    Ok((metric("seckill_worker_batch_size_sum")?, metric("seckill_worker_batch_size_count")?))
}

fn wait_drained(apps: &[App; 2]) -> anyhow::Result<()> {
    for (app, name) in apps.iter().zip(["a", "b"]) {
        ensure!(app.wait_drained(&format!("ab-{name}"), Duration::from_secs(60)), "ab: {name}'s queue did not drain");
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::steps::handle_signals()?;
    need_tools(&[("wrk", "wrk")])?;
    let raw = raw_dir("ab")?;
    let mut bins = vec![];
    for (name, rev, bin) in [("a", &args.a, &args.a_bin), ("b", &args.b, &args.b_bin)] {
        bins.push(match (rev, bin) {
            (_, Some(bin)) => bin.clone(),
            (Some(rev), None) => build_rev(rev, name, args.profile, &raw)?,
            (None, None) => bail!("give --{name} or --{name}-bin"),
        });
    }
    let labels: Vec<String> = [(&args.a, &bins[0], &args.a_env), (&args.b, &bins[1], &args.b_env)]
        .iter()
        .map(|(rev, bin, env)| {
            let build = rev.as_ref().map_or_else(|| bin.display().to_string(), |r| r.to_string());
            env.iter().fold(build, |label, (k, v)| format!("{label} {k}={v}"))
        })
        .collect();
    let services = Services::start(&Options::default())?;
    let start = |bin: &Path, name: &str, extra: &[(String, String)]| {
        let prefix = format!("ab-{name}");
        let limit = if args.rate_limited { "10/1s" } else { "1000000/1s" };
        // A database each: the builds may differ in their migrations.
        let database = services.postgres.create_database(&services.tools, &format!("ab_{name}"))?;
        let mut env = vec![
            ("SECKILL_KEY_PREFIX", prefix.as_str()),
            ("SECKILL_RATE_LIMIT", limit),
            ("SECKILL_DATABASE_URL", database.as_str()),
            ("RUST_LOG", "warn"),
            // wrk's connections all come from 127.0.0.1, as do this driver's own requests: no
            // per-client cap (the listener's budget still holds), or `--connections 256` meets it.
            ("SECKILL_MAX_CONNECTIONS_PER_CLIENT", "0"),
        ];
        if args.spread_clients {
            env.push(("SECKILL_TRUSTED_PROXIES", "127.0.0.1"));
        }
        env.extend(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let app = App::start(&services, bin, &env)?;
        app.seed(&prefix, if args.sold_out { 0 } else { 10_000_000 }, None)?;
        anyhow::Ok(app)
    };
    let apps = [start(&bins[0], "a", &args.a_env)?, start(&bins[1], "b", &args.b_env)?];
    let _cap = match args.redis_cores {
        Some(cores) => {
            let pid = services.redis.pid().context("no Redis pid to cap")?;
            let cap = CpuCap::new(pid, cores)?;
            eprintln!("==> ab: Redis (pid {pid}) held to {cores} cores in {}", cap.dir().display());
            Some(cap)
        }
        None => None,
    };
    let repo = testbed::workspace_root();
    let mut samples = vec![];
    for round in (1..=args.rounds).take_while(|_| !crate::steps::signalled()) {
        // Whichever runs second gains a few %: alternate who does.
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for i in order {
            let (name, sale, prefix) = (["a", "b"][i], format!("ab-{}", ["a", "b"][i]), format!("r{round}"));
            let mode = if args.spread_clients {
                Mode::BuyXff { sale: &sale, prefix: &prefix }
            } else {
                Mode::Buy { sale: &sale, prefix: &prefix }
            };
            let w = Wrk {
                threads: args.threads,
                connections: args.connections,
                seconds: args.duration,
                url: &apps[i].url,
                mode,
                rate: args.rate,
            };
            let mut watch = vec![Watch::process("seckill", apps[i].pid())];
            watch.extend(services.redis.pid().map(|p| Watch::process("redis", p)));
            watch.extend(services.postgres.pid().map(|p| Watch::tree("postgres", p)));
            let stats_before = CommandStats::of(&services.redis);
            let inserts_before = worker_inserts(&apps[i])?;
            let switches_before = switches(apps[i].pid() as i32).unwrap_or_default();
            let run = process::run(
                &format!("ab-{name}-{round}"),
                w.command(&repo),
                Duration::from_secs(args.duration + 30),
                &watch,
                &raw,
            )?;
            let stats = CommandStats::of(&services.redis).since(&stats_before);
            let switched = switches(apps[i].pid() as i32).unwrap_or_default().since(switches_before);
            // Both queues drained: this run's inserts all counted, and the next run starts clean.
            wait_drained(&apps)?;
            let inserts = worker_inserts(&apps[i])?;
            let (orders, inserts) = (inserts.0 - inserts_before.0, inserts.1 - inserts_before.1);
            let (calls, usec) = stats.get("evalsha");
            let out = WrkOut::parse(&run.stdout).context("no BENCH_WRK line in wrk's output")?;
            let per_request = |label| run.usage.get(label).unwrap_or(0.0) / out.requests.max(1) as f64 * 1e6;
            let s = Sample {
                build: i,
                round,
                rate: out.rate(),
                cpu_us: PARTS.map(|(label, _)| per_request(label)),
                created: out.status("201"),
                requests: out.requests,
            };
            eprintln!(
                "ab: round {round} {name}: {:.0} req/s, app / Redis / Postgres {:.1} / {:.1} / {:.1} µs/req, 201 {} of {}, \
                 {:.2} requests per script call, {:.1} µs in script calls per request, {:.1} orders per worker insert, \
                 app context switches {:.2} + {:.2} per request (voluntary + involuntary), p50 / p99 {:.2} / {:.2} ms",
                s.rate,
                s.cpu_us[0],
                s.cpu_us[1],
                s.cpu_us[2],
                s.created,
                s.requests,
                s.requests as f64 / calls.max(1) as f64,
                usec as f64 / s.requests.max(1) as f64,
                orders / inserts.max(1.0),
                switched.voluntary as f64 / s.requests.max(1) as f64,
                switched.involuntary as f64 / s.requests.max(1) as f64,
                out.latency_us.p50 / 1000.0,
                out.latency_us.p99 / 1000.0
            );
            eprintln!("ab: round {round} {name}: {}", stats.breakdown(s.requests, s.cpu_us[1]));
            samples.push(s);
        }
    }
    let interrupted = crate::steps::interrupted();
    if interrupted.is_none() {
        for (app, name) in apps.iter().zip(["a", "b"]) {
            let (rc, _, _) = reconcile(app, &format!("ab-{name}"))?;
            ensure!(rc == 0, "ab: {name}'s sale did not reconcile (seckill reconcile exited {rc})");
        }
        eprintln!("==> ab: both sales reconciled: the promises hold");
    }
    drop(apps);
    drop(services);
    if let Some(code) = interrupted {
        return Ok(code);
    }
    summary(&samples, &labels, args.rate_limited || args.sold_out)?;
    let _ = std::fs::remove_dir_all(&raw);
    Ok(ExitCode::SUCCESS)
}

/// `refusals`: the runs measured a path that buys nothing (rate limited, sold out).
fn summary(samples: &[Sample], labels: &[String], refusals: bool) -> anyhow::Result<()> {
    let per = if refusals { "request" } else { "purchase" };
    let mut med = vec![];
    for (i, name) in ["a", "b"].iter().enumerate() {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.build == i).collect();
        ensure!(refusals || mine.iter().all(|s| s.created == s.requests), "{name}: not every request bought");
        let rate = median(mine.iter().map(|s| s.rate).collect());
        let cpu = [0, 1, 2].map(|k| median(mine.iter().map(|s| s.cpu_us[k]).collect()));
        println!(
            "{name} = {}: median {} req/s, app / Redis / Postgres {:.1} / {:.1} / {:.1} µs CPU per {per}",
            labels[i],
            group(rate),
            cpu[0],
            cpu[1],
            cpu[2]
        );
        med.push((rate, cpu));
    }
    println!("b / a: {:.3} × req/s, {:.3} × app CPU per {per}", med[1].0 / med[0].0, med[1].1[0] / med[0].1[0]);
    // One Redis thread's ceiling at these calls' sizes: 1 / its CPU per purchase (a refusal
    // costs Redis next to nothing: no line for those).
    if !refusals {
        println!(
            "{per}s per Redis CPU-second, median: a {} → b {}",
            group(1e6 / med[0].1[1]),
            group(1e6 / med[1].1[1])
        );
    }
    // Paired: b / a within each round (its two runs are seconds apart, so drift between rounds
    // cancels out), then the median and the range over rounds.
    let rounds: std::collections::BTreeSet<u32> = samples.iter().map(|s| s.round).collect();
    let paired = |f: &dyn Fn(&Sample) -> f64| {
        let ratios: Vec<f64> = rounds
            .iter()
            .map(|r| {
                let get = |b| samples.iter().find(|s| s.round == *r && s.build == b).map(f).unwrap_or(f64::NAN);
                get(1) / get(0)
            })
            .collect();
        median_and_range(ratios)
    };
    println!("paired b / a over {} rounds, median (range): {} × req/s", rounds.len(), paired(&|s| s.rate));
    for (k, (_, part)) in PARTS.iter().enumerate() {
        println!("  {} × {part} CPU per {per}", paired(&|s| s.cpu_us[k]));
    }
    Ok(())
}
