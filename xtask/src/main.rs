//! `cargo xtask <task>`: seckill's project automation, in Rust (the cargo xtask convention).
//! Servers come from the `testbed` crate, the same code the integration tests use.
//!
//! # Layout
//! - `test`: the one test command (fmt, clippy, layer check, cargo test on throwaway servers,
//!   the API fuzz, the compose lint, the k8s lint, the api tests again on a Redis Cluster).
//! - `run`: the service on throwaway servers with a demo sale, until Ctrl-C.
//! - `bench/`: the benchmark driver and its report (JSON + Markdown).
//! - `ab`: paired A/B rounds of two builds on in-stock `/buy`.
//! - `shard_ceiling`: the stock-sharding ceiling run.
//! - `load`: the k6 flash crowd and the oha runs, with their invariants.

mod ab;
mod bench;
mod fuzz;
mod load;
mod run;
mod script_ab;
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
    /// Measures the stock-sharding ceiling (Redis and /buy) for K = 1..3 on a local cluster.
    ShardCeiling(shard_ceiling::Args),
    /// Load runs with k6 (the flash crowd) or oha, then the invariants.
    Load(load::Args),
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    match Cli::parse().task {
        Task::Test(args) => test::run(args),
        Task::Run(args) => run::run(args),
        Task::Bench(args) => bench::run(args),
        Task::Ab(args) => ab::run(args),
        Task::ScriptAb(args) => script_ab::run(args),
        Task::ShardCeiling(args) => shard_ceiling::run(args),
        Task::Load(args) => load::run(args),
    }
}
