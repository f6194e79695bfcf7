//! seckill: a flash-sale purchase service.
//!
//! `POST /buy` -> per-client rate limiter (Lua, five algorithms) -> one atomic purchase script (Lua) that
//! checks the sale, refuses a second purchase by the same user, refuses at zero stock, and
//! otherwise records the buyer, decrements stock and appends the order to the sale's Redis stream.
//! The worker copies orders from the streams into Postgres and acknowledges them after commit.

pub mod client_ip;
pub mod config;
pub mod db;
pub mod domain;
pub mod error;
pub mod keys;
pub mod limiter;
pub mod metrics;
pub mod reconcile;
pub mod redis_conn;
pub mod redis_store;
pub mod routes;
pub mod scripts;
pub mod shards;
pub mod sold_out;
pub mod startup;
pub mod telemetry;
pub mod worker;
