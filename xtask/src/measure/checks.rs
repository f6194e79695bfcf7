//! The checks after a run: the sale's queue drained, `seckill reconcile` (the promises hold), and
//! one query on the `seckill` database through psql.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use testbed::{App, Services};

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
