//! Throwaway servers for seckill's tests and tools: a Redis, a Postgres and a Redis Cluster (3
//! masters for the tests) on free loopback ports in a temp dir, stopped by PID. Both `cargo xtask` and the
//! integration tests start and reach servers through this crate, so there is one implementation
//! of the server lifecycle and no environment-variable contract between two languages.
//!
//! # Layout
//! - `tools` / `apt`: finding (as root: installing) redis-server, Postgres, Chromium.
//! - `process`: free ports, stopping a process by PID, sweeping leftovers.
//! - `redis` / `cluster` / `postgres`: one kind of server each: start, stop, restart.
//! - `services`: [`Services`], all of them in one temp dir, and the handle file tests attach to.
//! - `app`: [`App`], the `seckill` binary as a child process.
//! - `python`: the Python tools (k6, schemathesis) in one venv under `target/`.
//!
//! # How tests reach the servers
//! `cargo xtask test` starts [`Services`], writes a handle file ([`Services::handle_file`]) and
//! names it in the one variable [`Services::ENV`] (`SECKILL_TESTBED`); a test binary calls
//! [`Services::from_env`] and gets the same typed handles back (URLs, and servers it can stop
//! and restart). The handle's [`Target`] says which Redis the api tests use in that pass.
//!
//! These servers never touch the machine's own Redis or Postgres (6379/5432): they get their own
//! ports, data dirs and sockets, and are stopped by PID, never by name.

mod app;
mod apt;
mod cluster;
mod postgres;
mod process;
pub mod python;
mod redis;
mod services;
mod tools;

pub use app::{App, Profile, workspace_root};
pub use cluster::{Cluster, NODE_TIMEOUT_MS};
pub use postgres::Postgres;
pub use process::{
    free_port, pid_alive, port_is_free, signal_group, signal_pid, stop_pid, stop_pid_with, wait_pid_gone,
};
pub use redis::Redis;
pub use services::{Options, Services, Target};
pub use tools::{Toolbox, Tools, ensure_tools};

/// Re-exported for [`signal_pid`] and [`stop_pid_with`].
pub use nix::sys::signal::Signal;

/// The last 40 lines of a log file, as `"\n--- last lines of FILE ---\n..."`, for error messages.
pub(crate) fn log_tail(file: &std::path::Path) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    format!("\n--- last lines of {} ---\n{tail}", file.display())
}
