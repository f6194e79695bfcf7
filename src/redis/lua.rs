//! The Lua scripts in `lua/`, compiled into the binary, and [`run`], which runs one by SHA.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, FromRedisValue, RedisResult, Script, ScriptInvocation, ServerErrorKind};

/// How many times [`run`] starts over when the script vanished again before its retry.
const NOSCRIPT_ATTEMPTS: usize = 3;

/// Runs a script by SHA (EVALSHA). redis-rs loads it and retries once when Redis answers NOSCRIPT
/// (after a restart, a failover or SCRIPT FLUSH); a second flush between that load and the retry
/// would still fail, so the whole call starts over, a few times.
pub async fn run<T: FromRedisValue>(
    invocation: &ScriptInvocation<'_>,
    con: &mut impl ConnectionLike,
) -> RedisResult<T> {
    let mut attempt = 1;
    loop {
        match invocation.invoke_async(con).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) && attempt < NOSCRIPT_ATTEMPTS => {
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// The error for a script reply (or a value a script wrote) the caller does not understand.
pub fn unexpected_reply(script: &str, reply: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "unexpected script reply",
        format!("{script} answered {reply:?}"),
    ))
}

/// `lua/buy.lua`: the atomic purchase (check, SADD, DECR, XADD).
pub static BUY: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/buy.lua")));

/// `lua/seed.lua`: create or re-seed a sale unless it has buyers.
pub static SEED: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/seed.lua")));

/// `lua/restore.lua`: put buyers Postgres holds and Redis lost back, stock lowered to match.
pub static RESTORE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/restore.lua")));

/// `lua/trim.lua`: XTRIM MINID of the entries the consumer group is done with.
pub static TRIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/trim.lua")));

/// `lua/prune_consumers.lua`: XGROUP DELCONSUMER of consumers idle past the claim timeout with
/// nothing pending.
pub static PRUNE_CONSUMERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/prune_consumers.lua")));

/// `lua/sliding_log.lua`: the sliding-window log limiter (sorted set).
pub static SLIDING_LOG: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/sliding_log.lua")));

/// `lua/sliding_counter.lua`: the sliding-window counter limiter (weighted previous window).
pub static SLIDING_COUNTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/sliding_counter.lua")));

/// `lua/fixed_window.lua`: the fixed-window counter limiter.
pub static FIXED_WINDOW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/fixed_window.lua")));

/// `lua/token_bucket.lua`: the token-bucket limiter.
pub static TOKEN_BUCKET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/token_bucket.lua")));

/// `lua/gcra.lua`: the generic cell rate algorithm limiter.
pub static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/gcra.lua")));
