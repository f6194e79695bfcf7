//! Fault injection against real processes: the `seckill` binary runs as a child process against
//! the throwaway redis-server and Postgres of `cargo xtask test`, which some tests stop and restart.
//! Every scenario ends by checking the service's promises (see `common::Probe::assert_invariants`).

#[path = "../common/mod.rs"]
mod common;

mod harness;
mod lifecycle;
mod storm_client;

mod bad_input;
mod cluster;
mod crash;
mod drop_line_storm;
mod drop_storm;
mod export;
mod http_workers;
mod instances;
mod logs;
mod outages;
mod replicas;
mod reseed;
mod reservations;
mod retire;
mod soak;
mod stock_and_sigterm;
mod traces;
mod webhook_endpoints;
mod webhooks;
