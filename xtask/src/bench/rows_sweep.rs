//! The concurrency sweep: `POST /buy` in stock on one app at each of `SWEEP_CONNECTIONS`
//! keep-alive connections, one row each, as long as a main row; then the sale's invariants.
//! The report draws throughput, p99 and CPU per purchase by party against the connections
//! (`sweep`, `chart`).

use super::model::{SWEEP_CONNECTIONS, sweep_key};
use super::runner::{Bench, HIGH_RATE_LIMIT, warm_up};
use crate::measure::wrk::Mode;

/// The sweep's sale (stock never runs out in the rows).
pub const SALE: &str = "bench-sweep";

pub fn sweep_rows(b: &mut Bench) -> anyhow::Result<()> {
    // Every connection comes from 127.0.0.1: no per-client cap in these rows.
    let app = b.start_app(&[("SECKILL_RATE_LIMIT", HIGH_RATE_LIMIT), ("SECKILL_MAX_CONNECTIONS_PER_CLIENT", "0")])?;
    b.seed(&app, SALE, 10_000_000)?;
    warm_up(b, &app, "sweep")?;
    for c in SWEEP_CONNECTIONS {
        let prefix = format!("c{c}");
        b.wrk(&sweep_key(c), &app, b.args.duration(), c, Mode::Buy { sale: SALE, prefix: &prefix }, None)?;
    }
    b.check(&app, SALE)?;
    b.stop_app(app);
    Ok(())
}
