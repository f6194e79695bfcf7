//! seckill: a flash-sale purchase service.
//!
//! `POST /buy` -> per-client rate limiter (Lua, five algorithms) -> one atomic purchase script (Lua) that
//! checks the sale, refuses a second purchase by the same user, refuses at zero stock, and
//! otherwise records the buyer, decrements stock and appends the order to the sale's Redis stream.
//! The worker copies orders from the streams into Postgres and acknowledges them after commit.

pub mod app;
pub mod config;
pub mod db;
pub mod domain;
pub mod http;
pub mod limiter;
pub mod metrics;
pub mod orders;
pub mod purchase;
pub mod reconcile;
pub mod redis;
pub mod telemetry;
