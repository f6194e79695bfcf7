//! The order stream seen from Redis: a queue-lag sampler (XLEN and the oldest entry's age while a
//! row buys) and the worker drain (how fast `seckill worker` empties a queued stream).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;

use crate::measure::cpu::{Snapshot, Usage, Watch};
use crate::measure::process::stop_child;

/// The maxima a [`Sampler`] saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueueStats {
    pub stream: String,
    pub interval_s: f64,
    pub samples: u64,
    pub max_xlen: u64,
    pub max_oldest_age_ms: u64,
    pub sum_xlen: u64,
    pub nonempty_samples: u64,
    pub mean_xlen: f64,
}

/// Samples a stream every `interval` on a thread of its own until stopped (or `max` passed).
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<QueueStats>>,
}

fn connect(url: &str) -> anyhow::Result<redis::Connection> {
    let client = redis::Client::open(url)?;
    Ok(client.get_connection_with_timeout(Duration::from_secs(5))?)
}

impl Sampler {
    pub fn start(redis_url: &str, stream: &str, interval: Duration, max: Duration) -> anyhow::Result<Self> {
        let mut con = connect(redis_url)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut stats =
            QueueStats { stream: stream.to_string(), interval_s: interval.as_secs_f64(), ..Default::default() };
        let thread = std::thread::spawn(move || {
            let end = Instant::now() + max;
            while !flag.load(Ordering::Relaxed) && Instant::now() < end {
                let (now, xlen, oldest): ((u64, u64), u64, Vec<(String, redis::Value)>) = redis::pipe()
                    .cmd("TIME")
                    .cmd("XLEN")
                    .arg(&stats.stream)
                    .cmd("XRANGE")
                    .arg(&stats.stream)
                    .arg("-")
                    .arg("+")
                    .arg("COUNT")
                    .arg(1)
                    .query(&mut con)?;
                let now_ms = now.0 * 1000 + now.1 / 1000;
                stats.samples += 1;
                stats.sum_xlen += xlen;
                stats.max_xlen = stats.max_xlen.max(xlen);
                if let Some((id, _)) = oldest.first() {
                    stats.nonempty_samples += 1;
                    let ms: u64 = id.split('-').next().unwrap_or("0").parse()?;
                    stats.max_oldest_age_ms = stats.max_oldest_age_ms.max(now_ms.saturating_sub(ms));
                }
                std::thread::sleep(interval);
            }
            if stats.samples > 0 {
                stats.mean_xlen = (stats.sum_xlen as f64 / stats.samples as f64 * 10.0).round() / 10.0;
            }
            Ok(stats)
        });
        Ok(Self { stop, thread })
    }

    pub fn stop(self) -> anyhow::Result<QueueStats> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow::anyhow!("the queue sampler panicked"))?
    }
}

/// One drain: times are seconds since the epoch, as the report subtracts them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Drain {
    pub stream: String,
    pub initial_xlen: u64,
    pub final_xlen: u64,
    pub started: f64,
    pub first_drop_at: Option<f64>,
    pub xlen_at_first_drop: Option<u64>,
    pub ended_at: f64,
    pub timed_out: bool,
    pub wall_s: f64,
    pub watched_cpu_s: std::collections::BTreeMap<String, f64>,
}

fn epoch() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Starts `worker` (its output to `<raw>/worker.log`), polls XLEN every 5 ms until it is 0 (or
/// `timeout`), then stops the worker by PID. `watch` gets the worker's own CPU as `worker`.
pub fn drain(
    redis_url: &str,
    stream: &str,
    mut worker: Command,
    timeout: Duration,
    watch: &[Watch],
    raw: &Path,
) -> anyhow::Result<Drain> {
    let mut con = connect(redis_url)?;
    let xlen = |con: &mut redis::Connection| -> anyhow::Result<u64> { Ok(redis::cmd("XLEN").arg(stream).query(con)?) };
    let initial = xlen(&mut con)?;
    let before = Snapshot::take(watch);
    let started = epoch();
    let log = std::fs::File::create(raw.join("worker.log"))?;
    worker.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    let mut child = worker.spawn().context("starting seckill worker")?;
    let deadline = Instant::now() + timeout;
    let (mut first, mut left) = (None, initial);
    let result = (|| -> anyhow::Result<()> {
        loop {
            left = xlen(&mut con)?;
            let now = epoch();
            if first.is_none() && left < initial {
                first = Some((now, left));
            }
            if left == 0 || Instant::now() > deadline || child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    })();
    let ended = epoch();
    let mut usage: Usage = before.usage();
    if let Some(cpu) = crate::measure::cpu::process_cpu(child.id() as i32) {
        usage.watched_cpu_s.insert("worker".into(), (cpu * 1000.0).round() / 1000.0);
    }
    stop_child(&mut child, Duration::from_secs(20));
    result?;
    Ok(Drain {
        stream: stream.to_string(),
        initial_xlen: initial,
        final_xlen: left,
        started,
        first_drop_at: first.map(|f| f.0),
        xlen_at_first_drop: first.map(|f| f.1),
        ended_at: ended,
        timed_out: left != 0,
        wall_s: ((ended - started) * 1000.0).round() / 1000.0,
        watched_cpu_s: usage.watched_cpu_s,
    })
}
