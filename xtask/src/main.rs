//! `cargo xtask <task>`: seckill's project automation, in Rust (the cargo xtask convention).
//! Servers come from the `testbed` crate, the same code the integration tests use.
//!
//! # Layout
//!
//! The modules stand in layers, lowest first. A module imports from the layers below its own
//! only: the commands stand on the measuring layer and none imports another (the test at the end
//! of this file checks every `crate::` path against this list, with `layout`).
//!
//! 1. Base: `steps`, `layout` (child processes bounded by a deadline, the signals passed on to
//!    them; the check of these layout lists, in tests only).
//! 2. Measuring: `measure/` (processes' CPU, bounded generator runs, wrk's and redis-benchmark's
//!    outputs, `/metrics` and the drivers' own requests, Redis's commandstats, the checks after a
//!    run, the machine and its tools, paired medians and number formats, shared settings).
//! 3. Commands, one per task: `test/`, `run`, `bench/`, `ab`, `script_ab`, `script_parts`, `shard_ceiling/`,
//!    `load/` (the test suite with its API fuzz; the service with a demo sale; the benchmark and
//!    its report; paired A/B rounds of two builds on `/buy`; of two revisions' purchase script on
//!    Redis; where its Redis CPU goes; the stock-sharding ceiling; the k6 and oha load runs with their invariants, and the
//!    webhook dispatcher's delivery lag under paced purchases).

mod ab;
mod bench;
#[cfg(test)]
mod layout;
mod load;
mod measure;
mod run;
mod script_ab;
mod script_parts;
mod shard_ceiling;
mod steps;
mod test;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "seckill's project automation")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Runs the whole test suite against throwaway servers (what CI runs).
    Test(test::Args),
    /// Runs the service against throwaway servers with a demo sale, until Ctrl-C.
    Run(run::Args),
    /// Runs the benchmark and writes load-tests/results/bench.{json,md}.
    Bench(bench::Args),
    /// Paired A/B rounds of two builds on in-stock /buy.
    Ab(ab::Args),
    /// Paired A/B rounds of two revisions' lua/buy_batch.lua alone on Redis (CPU per purchase).
    ScriptAb(script_ab::Args),
    /// Where a purchase's Redis CPU goes: lua/buy_batch.lua with its parts taken out one by one.
    ScriptParts(script_parts::Args),
    /// Measures the stock-sharding ceiling (Redis and /buy) for K = 1..3 on a local cluster.
    ShardCeiling(shard_ceiling::Args),
    /// Load runs with k6 (the flash crowd), oha or wrk (the webhooks' delivery lag), then the invariants.
    Load(load::Args),
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    match Cli::parse().task {
        Task::Test(args) => test::run(args),
        Task::Run(args) => run::run(args),
        Task::Bench(args) => bench::run(args),
        Task::Ab(args) => ab::run(args),
        Task::ScriptAb(args) => script_ab::run(args),
        Task::ScriptParts(args) => script_parts::run(args),
        Task::ShardCeiling(args) => shard_ceiling::run(args),
        Task::Load(args) => load::run(args),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_module_imports_only_the_layers_below_and_no_command_another() {
        crate::layout::check("", include_str!("main.rs"), "crate::", false);
    }
}
