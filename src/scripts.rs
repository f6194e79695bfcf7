//! The Lua scripts in `lua/`, compiled into the binary. Each is run by SHA (EVALSHA) through
//! `Script::invoke_async`, which loads the script and retries once when Redis answers NOSCRIPT
//! (after a restart, a failover or SCRIPT FLUSH).

use std::sync::LazyLock;

use redis::Script;

/// `lua/buy.lua`: the atomic purchase (check, SADD, DECR, XADD).
pub static BUY: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/buy.lua")));

/// `lua/seed.lua`: create or re-seed a sale unless it has buyers.
pub static SEED: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/seed.lua")));

/// `lua/ack.lua`: XACK + XDEL of committed orders.
pub static ACK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/ack.lua")));

/// `lua/sliding_window.lua`: the per-client sliding-window log limiter.
pub static SLIDING_WINDOW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/sliding_window.lua")));
