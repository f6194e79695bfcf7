//! The measuring layer every command stands on: what a run costs and how it went, and how the
//! figures are printed. No command's own logic lives here, and nothing here imports a command.
//!
//! # Layout
//!
//! The modules stand in layers, lowest first; a module imports from its own layer and the layers
//! below only, and the modules of one layer not in a circle (the test at the end of this file checks
//! every `super::` path against this list, with `crate::layout`).
//!
//! 1. Readings: `cpu`, `cgroup`, `http`, `commandstats`, `wrk`, `checks`, `host`, `clock`, `stats`,
//!    `settings`, `lua` (CPU accounting from /proc and context switches, a process held to a share of a core, the drivers' own requests and
//!    `/metrics`, Redis's calls by command, wrk's and redis-benchmark's outputs, the queue drained
//!    then `seckill reconcile` and psql, the machine and its tools, RFC 3339 times, medians and
//!    paired ratios and number formats, `--profile` and `NAME=VALUE` settings, the app's Lua scripts assembled).
//! 2. Runs: `process`, `script_run` (one generator run, bounded in time and stopped by PID, with
//!    the CPU of the watched processes meanwhile; a purchase script's call repeated by
//!    redis-benchmark on a fresh keyspace, with the Redis server's CPU meanwhile).

pub mod cgroup;
pub mod checks;
pub mod clock;
pub mod commandstats;
pub mod cpu;
pub mod host;
pub mod http;
pub mod lua;
pub mod process;
pub mod script_run;
pub mod settings;
pub mod stats;
pub mod wrk;

#[cfg(test)]
mod tests {
    #[test]
    fn every_module_imports_only_its_own_layer_and_below_without_a_circle() {
        crate::layout::check("measure", include_str!("mod.rs"), "super::", true);
    }
}
