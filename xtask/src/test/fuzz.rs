//! The API fuzz step of `cargo xtask test`: schemathesis against the service's own OpenAPI
//! document (`GET /openapi.json`), with every check (no 5xx, responses match the document,
//! schema-valid requests accepted, 405s carry Allow, ...), a fixed seed and at most 60 examples
//! per operation, so a run is repeatable and bounded (a few seconds; 300 s at most).
//!
//! Before it, one sale is seeded in each state (open, sharded, sold out, not started, ended), and
//! `schemathesis.toml` makes most generated purchases name one of them, so `POST /buy` is fuzzed
//! through the purchase itself, not only to a 404. schemathesis (pinned) is pip-installed when
//! missing; the service is the debug binary `cargo test` built, started with `testbed::App`.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use serde_json::json;
use testbed::{App, Profile, Services};

use crate::steps;

/// The fuzz service's payment events secret, which the hooks sign with.
const PAYMENT_SECRET: &str = "fuzz-payment-secret-of-at-least-32-bytes";
/// The most one schemathesis run may take.
const LIMIT: Duration = Duration::from_secs(300);

/// Runs the fuzz against a fresh `seckill serve` on `services`; fails if schemathesis does.
pub fn run(services: &Services, deadline: Instant) -> Result<()> {
    let root = testbed::workspace_root();
    // The pinned release (testbed::python::SCHEMATHESIS), in target/py-venv.
    let schemathesis = testbed::python::ensure(testbed::python::SCHEMATHESIS, None)?;
    let mut build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    let status = steps::run(build.args(Profile::Debug.cargo_args()).current_dir(&root), deadline)?;
    ensure!(status.success(), "cargo {}: {status}", Profile::Debug.cargo_args().join(" "));

    let prefix = format!("fuzz-{}", std::process::id());
    let env = [
        ("SECKILL_KEY_PREFIX", prefix.as_str()),
        ("SECKILL_RATE_LIMIT", "1000000/1s"),
        ("SECKILL_PAYMENT_SECRET", PAYMENT_SECRET),
        ("RUST_LOG", "warn"),
    ];
    let app = App::start(services, &Profile::Debug.binary(), &env)?;
    app.seed("fuzz-open", 1_000_000, None)?;
    app.put_sale("fuzz-reserved", &json!({"stock": 1_000_000, "payment_window": "1h"}))?;
    app.seed("fuzz-sharded", 1_000_000, Some(3))?;
    app.seed("fuzz-sold-out", 0, None)?;
    app.put_sale("fuzz-not-started", &json!({"stock": 100, "starts_at": "2999-01-01T00:00:00Z"}))?;
    // A seed that has already ended is refused, so this one ends a moment after it is seeded.
    let ends_at = humantime::format_rfc3339_millis(std::time::SystemTime::now() + Duration::from_secs(3)).to_string();
    app.put_sale("fuzz-ended", &json!({"stock": 100, "starts_at": "2000-01-01T00:00:00Z", "ends_at": ends_at}))?;
    // A waiting room open since 2000 and started: a join gets a place; a purchase without an
    // admission is refused (403 not_admitted).
    let queue = json!({"opens_at": "2000-01-01T00:00:00Z", "rate": 1000});
    app.put_sale("fuzz-queued", &json!({"stock": 1_000_000, "starts_at": "2000-01-01T00:00:01Z", "queue": queue}))?;

    let mut st = Command::new(schemathesis);
    st.arg("run")
        .arg(format!("{}/openapi.json", app.url))
        .args(["--checks", "all", "--max-examples", "60", "--seed", "1", "--request-timeout", "5"])
        // `--checks all` turns back on what schemathesis.toml turns off: the stateful phase's
        // "deleted resource still available", which a retirement's kept audit trail trips.
        .args(["--exclude-checks", "use_after_free"])
        .arg("-H")
        .arg(format!("Authorization: Bearer {}", app.admin_token))
        .env("SECKILL_PAYMENT_SECRET", PAYMENT_SECRET) // the hooks sign payment events with it
        .current_dir(&root); // schemathesis.toml
    let status = steps::run(&mut st, deadline.min(Instant::now() + LIMIT))?;
    ensure!(status.success(), "schemathesis: {status}");
    Ok(())
}
