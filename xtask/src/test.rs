//! `cargo xtask test`: the one test command (what CI runs). On throwaway servers from `testbed`
//! (a Redis, Postgres and a 3-master Redis Cluster): fmt check, clippy, `cargo test --workspace`,
//! the API fuzz (schemathesis, see `fuzz`), the compose lint, the Kubernetes manifests' lint
//! (`scripts/lint-k8s.sh`), then the api integration tests once more against the Redis Cluster. Every step runs and is reported; the task fails at the end if
//! any failed. Nothing is printed after a passing run's last `cargo test`: its summary stays the
//! closing output.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::Result;
use testbed::{Options, Services, Target};

use crate::steps;

/// `cargo xtask test [--no-cluster] [--timeout-minutes N] [CARGO TEST ARGS...]`.
#[derive(clap::Args)]
pub struct Args {
    /// Do not start the Redis Cluster (the faults tests that need it fail; the cluster pass is
    /// skipped).
    #[arg(long)]
    no_cluster: bool,
    /// Bound on the whole run, in minutes.
    #[arg(long, default_value_t = 80)]
    timeout_minutes: u64,
    /// Run the tests against the Redis Cluster instead of the single server (with extra cargo
    /// test args, e.g. `--against-cluster -- --test api retire`).
    #[arg(long, conflicts_with = "no_cluster")]
    against_cluster: bool,
    /// Extra arguments for the first `cargo test` only (e.g. `--test api buy`); with them the
    /// fuzz, compose lint, k8s lint and cluster steps do not run.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    cargo_test_args: Vec<String>,
}

/// The steps run so far and the names of those that failed.
struct Report {
    deadline: Instant,
    failed: Vec<String>,
}

impl Report {
    /// Runs one step, printing `==> NAME: COMMAND` before it and `==> NAME: FAILED (...)` after
    /// it if it fails.
    /// Once xtask got a signal, no further step starts.
    fn step(&mut self, name: &str, what: &str, step: impl FnOnce(Instant) -> Result<()>) {
        if steps::signalled() {
            return;
        }
        println!("\n==> {name}: {what}");
        if let Err(error) = step(self.deadline) {
            println!("==> {name}: FAILED ({error:#})");
            self.failed.push(name.to_owned());
        }
    }

    /// A step that is one command.
    fn command(&mut self, name: &str, command: &mut Command) {
        self.step(name, &steps::describe(command), |deadline| {
            let status = steps::run(command, deadline)?;
            anyhow::ensure!(status.success(), "{status}");
            Ok(())
        });
    }
}

/// Runs the task; the exit code is the task's result.
pub fn run(args: Args) -> Result<ExitCode> {
    steps::handle_signals()?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout_minutes * 60);
    let root = testbed::workspace_root();
    // Chromium and chromedriver too: tests/api/browser.rs.
    let services = Services::start(&Options { cluster: !args.no_cluster, browser: true })?;
    let cargo = || {
        let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        command.current_dir(&root);
        command
    };
    let mut report = Report { deadline, failed: vec![] };
    let extra = !args.cargo_test_args.is_empty();

    report.command("fmt", cargo().args(["fmt", "--all", "--", "--check"]));
    report.command(
        "clippy",
        cargo().args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]),
    );
    if extra && services.cluster.is_some() {
        println!("\n==> test (Redis Cluster): skipped (extra cargo test args given)");
    }
    let handle = services.handle_file(if args.against_cluster { Target::Cluster } else { Target::Server })?;
    let mut test = cargo();
    test.args(["test", "--workspace", "--locked"]).args(&args.cargo_test_args).env(Services::ENV, &handle);
    report.command("test", &mut test);
    if !extra {
        report.step("api fuzz (schemathesis)", "schemathesis against GET /openapi.json", |deadline| {
            crate::fuzz::run(&services, deadline)
        });
        report.command("compose lint", &mut Command::new(root.join("scripts/lint-compose.sh")));
        report.command("k8s lint", &mut Command::new(root.join("scripts/lint-k8s.sh")));
        if services.cluster.is_some() {
            let handle = services.handle_file(Target::Cluster)?;
            let mut test = cargo();
            // --workspace: the first run's feature set, so nothing is compiled again.
            test.args(["test", "--workspace", "--locked", "--test", "api"]).env(Services::ENV, &handle);
            report.command("test (Redis Cluster)", &mut test);
        }
    }

    if let Some(code) = steps::interrupted() {
        return Ok(code);
    }
    if !report.failed.is_empty() {
        println!(
            "\n==> cargo xtask test: failed steps: {} ({} s)",
            report.failed.join(", "),
            started.elapsed().as_secs()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
