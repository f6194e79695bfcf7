//! A plain sale selling beside the draw (issue 53: the draw "without holding Redis for more than
//! 50 ms at a time: a sale selling beside it keeps its p99"): `load-tests/k6/draw-buyers.js` in a
//! second k6 process, paced distinct buyers of the sale `beside` through the same two instances,
//! from before the entry storm until the draw has run. Each buy prints when it started and how long
//! it took; the driver cuts the run into phases on the same clock (`baseline` before the storm,
//! `storm` while k6 sends entries, `drain` while Postgres catches up, `draw` while
//! `POST /admin/drops/{drop}/draw` runs) and gives each its buy p50, p99 and the CPU every process
//! used meanwhile (a 2-core host: when the p99 moves, this says whose cores it was).
//!
//! The pass rule, on the draw only: p99(draw) ≤ max(2 × p99(baseline), p99(baseline) + 50 ms).
//! The 50 ms is the bound on one award call: a buy queued behind a whole award call is
//! that much later, and a p99 over a few seconds of draw sees such a buy. The storm's p99 is
//! printed as a ratio too, but it is no promise: there k6 itself takes most of the 2 cores.
//!
//! The sale has no payment window: the plain purchase is the shortest path through Redis (one
//! script call, then the stream), so a stall of Redis shows most in its latency, and nothing of it
//! expires or comes back while the draw runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use testbed::Signal;

use super::{Load, k6};
use crate::measure::cpu::{Snapshot, Usage, Watch};
use crate::measure::process::{stop_child, wait_bounded};

/// The sale selling beside the draw.
pub const SALE: &str = "beside";
const NAME: &str = "k6-draw-buyers";

/// Now, in ms since the Unix epoch (k6's `Date.now()` clock).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The buyers' k6, running; stopped (SIGTERM, then SIGKILL) if dropped before `stop`.
pub struct Buyers {
    child: Option<Child>,
    pub console: PathBuf,
}

impl Buyers {
    /// Starts `rate` buyers a second through `urls` for at most `bound_s` seconds; the second
    /// instance is killed at `kill_at_ms` (0: never).
    pub fn start(
        load: &Load,
        urls: &str,
        rate: u32,
        bound_s: u64,
        kill_at_ms: u64,
        local_ips: &str,
        run_id: &str,
    ) -> anyhow::Result<Self> {
        let console = load.results.join(format!("{NAME}-console.log"));
        if console.exists() {
            std::fs::remove_file(&console)?; // k6 appends
        }
        let env = [
            ("BASE_URLS", urls.to_owned()),
            ("RUN_ID", run_id.to_owned()),
            ("SALE", SALE.to_owned()),
            ("RATE", rate.to_string()),
            ("DURATION_S", bound_s.to_string()),
            ("KILL_AT_MS", kill_at_ms.to_string()),
        ];
        let extra = ["--local-ips".to_string(), local_ips.to_owned()];
        let mut cmd = k6::command(load, NAME, "draw-buyers.js", &env, &extra)?;
        load.log(&format!("buyers beside: {rate}/s of {SALE} for at most {bound_s} s (stopped after the draw)"));
        let child = cmd.stdin(Stdio::null()).spawn()?;
        Ok(Self { child: Some(child), console })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGINT (k6 stops its scenario and exits), waited for up to 30 s.
    pub fn stop(&mut self, load: &Load) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        testbed::signal_pid(child.id(), Signal::SIGINT);
        let (rc, timed_out) = wait_bounded(&mut child, Duration::from_secs(30))?;
        load.log(&format!("buyers beside stopped (k6 exit {rc}{})", if timed_out { ", timed out" } else { "" }));
        Ok(())
    }
}

impl Drop for Buyers {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, Duration::from_secs(5));
        }
    }
}

/// One buyer: when its first request went (Unix ms), how long until its last answer, that
/// answer's status, and whether it tried the other instance after the killed one failed it.
#[derive(Debug, Clone, Copy)]
pub struct Buy {
    pub start_ms: u64,
    pub ms: f64,
    pub status: u16,
    pub retried: bool,
    /// The instance that answered last (0: the first, which runs the draw).
    pub via: u8,
}

/// The buyers' console: every `buy` line, and the lines that are neither `buy` nor `order`.
pub fn read(path: &Path) -> anyhow::Result<(Vec<Buy>, Vec<String>)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut buys, mut other) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let parsed = match line.split(' ').collect::<Vec<_>>()[..] {
            ["buy", start, ms, status, retried, via] => (|| {
                Some(Buy {
                    start_ms: start.parse().ok()?,
                    ms: ms.parse().ok()?,
                    status: status.parse().ok()?,
                    retried: retried == "1",
                    via: via.parse().ok()?,
                })
            })(),
            ["order", ..] => continue,
            _ => None,
        };
        match parsed {
            Some(buy) => buys.push(buy),
            None => other.push(line.to_owned()),
        }
    }
    Ok((buys, other))
}

/// A phase under way: its name, its start (Unix ms) and the CPU counters then.
pub struct Open {
    name: &'static str,
    from_ms: u64,
    snapshot: Snapshot,
}

/// A phase done: its span and the CPU each watched process used in it.
pub struct Phase {
    pub name: &'static str,
    pub from_ms: u64,
    pub to_ms: u64,
    pub usage: Usage,
}

impl Open {
    pub fn begin(name: &'static str, watch: &[Watch]) -> Self {
        Self { name, from_ms: now_ms(), snapshot: Snapshot::take(watch) }
    }

    pub fn end(self) -> Phase {
        Phase { name: self.name, from_ms: self.from_ms, to_ms: now_ms(), usage: self.snapshot.usage() }
    }
}

/// The nearest-rank percentile `p` (0 to 1) of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A phase's buys (through instance `via` only if given): how many, p50, p99, max (ms).
fn stats(buys: &[Buy], phase: &Phase, via: Option<u8>) -> (usize, f64, f64, f64) {
    let mut ms: Vec<f64> = buys
        .iter()
        .filter(|b| (phase.from_ms..phase.to_ms).contains(&b.start_ms) && via.is_none_or(|v| v == b.via))
        .map(|b| b.ms)
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms.len(), percentile(&ms, 0.5), percentile(&ms, 0.99), ms.last().copied().unwrap_or(f64::NAN))
}

/// The CPU of a phase, in cores (CPU seconds per wall second): the machine's busy and steal, each
/// watched process, and the rest of the machine (other builds, the kernel's network path, xtask).
fn cores(usage: &Usage) -> String {
    let wall = usage.wall_s.max(1e-3);
    let busy = usage.get("machine_busy").unwrap_or(0.0);
    let mut parts = vec![format!("machine {:.2}", busy / wall)];
    let mut known = 0.0;
    for (label, cpu) in &usage.watched_cpu_s {
        if label.starts_with("machine_") {
            continue;
        }
        known += cpu;
        parts.push(format!("{label} {:.2}", cpu / wall));
    }
    // The children reaped in the phase: the storm's k6, when it ends (its pid gone, it is not
    // watched), and the psql and curl calls of the driver.
    let exited = usage.generator();
    if exited >= 0.005 * wall {
        known += exited;
        parts.push(format!("exited (k6 storm, psql, curl) {:.2}", exited / wall));
    }
    parts.push(format!("rest {:.2}", (busy - known).max(0.0) / wall));
    parts.push(format!("steal {:.2}", usage.get("machine_steal").unwrap_or(0.0) / wall));
    parts.join(", ")
}

/// Prints each phase's buys and CPU, checks every buy held its order and the rule on the draw's p99.
/// A buy answered 403 (`sale_paused`) after `paused_ms`, when the driver paused the sale to stop
/// the buyers, is no buy.
pub fn report(load: &mut Load, phases: &[Phase], buys: &[Buy], paused_ms: u64) {
    let stopping = |b: &Buy| b.status == 403 && b.start_ms + b.ms.ceil() as u64 >= paused_ms;
    let buys: Vec<Buy> = buys.iter().filter(|b| !stopping(b)).copied().collect();
    let buys = &buys[..];
    for phase in phases {
        let (n, p50, p99, max) = stats(buys, phase, None);
        let wall = (phase.to_ms - phase.from_ms) as f64 / 1000.0;
        // By instance: the first runs the draw, the second only sells.
        let by = |via| {
            let (n, _, p99, _) = stats(buys, phase, Some(via));
            format!("app {} {n} p99 {p99:.1} ms", via + 1)
        };
        println!(
            "beside {:<8} {wall:>7.1} s: {n} buys, p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms ({}, {}); cores: {}",
            phase.name,
            by(0),
            by(1),
            cores(&phase.usage)
        );
    }
    let held = |b: &Buy| b.status == 201 || (b.retried && b.status == 409);
    let (bad, retried) = (buys.iter().filter(|b| !held(b)).count(), buys.iter().filter(|b| b.retried).count());
    let ok = bad == 0 && !buys.is_empty();
    println!(
        "invariant beside answers: {} buys, {retried} retried (the killed instance's failures on the first, a 503 once on the same), {bad} without an order [{}]",
        buys.len(),
        if ok { "ok" } else { "FAILED" }
    );
    load.failures += u32::from(!ok);
    let p99 = |name: &str| phases.iter().find(|p| p.name == name).map_or(f64::NAN, |p| stats(buys, p, None).2);
    let (base, storm, draw) = (p99("baseline"), p99("storm"), p99("draw"));
    let bound = (2.0 * base).max(base + 50.0);
    let ok = draw <= bound; // false when a phase had no buys (NaN)
    println!(
        "invariant beside p99: draw {draw:.1} ms / baseline {base:.1} ms = {:.2} (storm {storm:.1} ms / baseline = {:.2}); \
         rule p99(draw) <= max(2 x baseline, baseline + 50 ms) = {bound:.1} ms [{}]",
        draw / base,
        storm / base,
        if ok { "ok" } else { "FAILED" }
    );
    load.failures += u32::from(!ok);
}
