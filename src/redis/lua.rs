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

/// `lua/buy.lua`'s source (a template: it names `lua/purchase.lua`).
const BUY_LUA: &str = include_str!("../../lua/buy.lua");

/// `lua/buy.lua`: the atomic purchase (check, SADD, DECR, XADD).
pub static BUY: LazyLock<Script> = LazyLock::new(|| assemble(BUY_LUA, ""));

/// `lua/buy_limited.lua` assembled with `limiter`, the source of one limiter script (one of
/// [`limiters`]), and `lua/buy.lua`: the rate limits and the purchase in one call.
pub fn buy_limited(limiter: &str) -> Script {
    assemble(include_str!("../../lua/buy_limited.lua"), limiter)
}

/// `lua/buy_batch.lua` assembled likewise: several purchases, each with its limits, in one call.
pub fn buy_batch(limiter: &str) -> Script {
    assemble(include_str!("../../lua/buy_batch.lua"), limiter)
}

/// One limiter script (one of [`limiters`]) run alone, with the preamble it names.
pub fn limiter(source: &str) -> Script {
    assemble(source, "")
}

/// The piece `lua/<name>.lua` that a script names on a line `-- @<name>`, besides `-- @limiter`.
fn piece(name: &str) -> &'static str {
    match name {
        "buy" => BUY_LUA,
        "purchase" => include_str!("../../lua/purchase.lua"),
        "release_gate" => include_str!("../../lua/release_gate.lua"),
        "nonce_spend" => include_str!("../../lua/nonce_spend.lua"),
        "canonical" => include_str!("../../lua/canonical.lua"),
        "limiter_preamble" => include_str!("../../lua/limiter_preamble.lua"),
        "queue_preamble" => include_str!("../../lua/queue_preamble.lua"),
        _ => panic!("a Lua script names the piece {name:?}, which crate::redis::lua does not know"),
    }
}

/// `template` with `limiter` put right after its `-- @limiter` line and each piece `lua/<name>.lua`
/// right after its `-- @<name>` line, in the pieces too, as the files' `sed` examples do; a piece
/// named again (`lua/canonical.lua`, by two pieces of one script) is put in at its first line only.
fn assemble(template: &str, limiter: &str) -> Script {
    Script::new(&assembled(template, limiter))
}

/// [`assemble`]'s source.
fn assembled(template: &str, limiter: &str) -> String {
    fn splice(source: &mut String, spliced: &mut Vec<String>, text: &str, limiter: &str) {
        for line in text.lines() {
            source.push_str(line);
            source.push('\n');
            match line.strip_prefix("-- @") {
                Some("limiter") => splice(source, spliced, limiter, ""),
                Some(name) if !spliced.iter().any(|done| done == name) => {
                    spliced.push(name.to_owned());
                    splice(source, spliced, piece(name), limiter);
                }
                Some(_) | None => {}
            }
        }
    }
    let mut source = String::with_capacity(2 * (template.len() + limiter.len() + BUY_LUA.len()));
    splice(&mut source, &mut Vec::new(), template, limiter);
    source
}

/// `lua/seed.lua`: create or re-seed a sale unless it has buyers.
pub static SEED: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/seed.lua")));

/// `lua/control.lua`: pause, resume or end a sale (one shard's meta).
pub static CONTROL: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/control.lua")));

/// `lua/restock.lua`: add units to a sale's stock or take unsold ones back, with `stock_initial`.
pub static RESTOCK: LazyLock<Script> = LazyLock::new(|| assemble(include_str!("../../lua/restock.lua"), ""));

/// `lua/drop_seed.lua`: seed or update a whole drop (every size, the group, the line) at once.
pub static DROP_SEED: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/drop_seed.lua")));

/// `lua/drop_control.lua`: pause, resume or end every size of a drop (and its line) at once.
pub static DROP_CONTROL: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/drop_control.lua")));

/// `lua/drop_restock.lua`: change several sizes' stock at once, all or nothing.
pub static DROP_RESTOCK: LazyLock<Script> = LazyLock::new(|| assemble(include_str!("../../lua/drop_restock.lua"), ""));

/// `lua/draw_enter.lua`: a buyer's one entry in a drop's draw (the entry kept and streamed).
pub static DRAW_ENTER: LazyLock<Script> = LazyLock::new(|| assemble(include_str!("../../lua/draw_enter.lua"), ""));

/// `lua/draw_award.lua`: a draw's winners of one size get their reservations (`lua/purchase.lua`'s rules).
pub static DRAW_AWARD: LazyLock<Script> = LazyLock::new(|| assemble(include_str!("../../lua/draw_award.lua"), ""));

/// `lua/draw_waitlist.lua`: a draw's waitlist put in Redis, each place once.
pub static DRAW_WAITLIST: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/draw_waitlist.lua")));

/// `lua/draw_release.lua`: a drawn size's release, its units offered to the waitlist first.
pub static DRAW_RELEASE: LazyLock<Script> = LazyLock::new(|| assemble(include_str!("../../lua/draw_release.lua"), ""));

/// `lua/held_floor.lua`: raise buyers' units held in a group to what Postgres holds.
pub static HELD_FLOOR: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/held_floor.lua")));
/// `lua/restore.lua`: put buyers Postgres holds and Redis lost back, stock lowered to match.
pub static RESTORE: LazyLock<Script> = LazyLock::new(|| assemble(include_str!("../../lua/restore.lua"), ""));

/// `lua/release.lua`: give cancelled or expired reservations' units back, each once.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| assemble(include_str!("../../lua/release.lua"), ""));

/// `lua/queue_join.lua`: join a queued sale's waiting room, or ask for one's place in it.
pub static QUEUE_JOIN: LazyLock<Script> = LazyLock::new(|| assemble(include_str!("../../lua/queue_join.lua"), ""));

/// `lua/admit.lua`: move a queued sale's admission on and read how far it got.
pub static ADMIT: LazyLock<Script> = LazyLock::new(|| assemble(include_str!("../../lua/admit.lua"), ""));

/// `lua/challenge_count.lua`: a client address's challenges in the last minute (`crate::challenge`).
pub static CHALLENGE_COUNT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/challenge_count.lua")));

/// `lua/challenge_spend.lua`: spends a proof of work's solution once in its sale.
pub static CHALLENGE_SPEND: LazyLock<Script> =
    LazyLock::new(|| assemble(include_str!("../../lua/challenge_spend.lua"), ""));

/// `lua/trim.lua`: XTRIM MINID of the entries the consumer group is done with.
pub static TRIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/trim.lua")));

/// `lua/prune_consumers.lua`: XGROUP DELCONSUMER of consumers idle past the claim timeout with
/// nothing pending.
pub static PRUNE_CONSUMERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/prune_consumers.lua")));

/// `lua/lock_keep.lua`: a lock its owner holds kept longer or given up, never another owner's.
pub static LOCK_KEEP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/lock_keep.lua")));

/// The limiter scripts' sources, each `lua/<name>.lua` (the algorithm's name with underscores),
/// each naming `lua/limiter_preamble.lua` (run one alone through [`limiter`]).
pub mod limiters {
    /// `lua/sliding_log.lua`: the sliding-window log (sorted set).
    pub const SLIDING_LOG: &str = include_str!("../../lua/sliding_log.lua");
    /// `lua/sliding_counter.lua`: the sliding-window counter (weighted previous window).
    pub const SLIDING_COUNTER: &str = include_str!("../../lua/sliding_counter.lua");
    /// `lua/fixed_window.lua`: the fixed-window counter.
    pub const FIXED_WINDOW: &str = include_str!("../../lua/fixed_window.lua");
    /// `lua/token_bucket.lua`: the token bucket.
    pub const TOKEN_BUCKET: &str = include_str!("../../lua/token_bucket.lua");
    /// `lua/gcra.lua`: the generic cell rate algorithm.
    pub const GCRA: &str = include_str!("../../lua/gcra.lua");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_two_pieces_name_is_put_in_once_before_its_first_use() {
        let draw_release = assembled(include_str!("../../lua/draw_release.lua"), "");
        let release = assembled(include_str!("../../lua/release.lua"), "");
        let batch = assembled(include_str!("../../lua/buy_batch.lua"), include_str!("../../lua/sliding_log.lua"));
        for source in [&draw_release, &release, &batch] {
            assert_eq!(source.matches("local function canonical(").count(), 1);
            let defined = source.find("local function canonical(").unwrap();
            assert!(source.find("canonical(stock_raw").is_none_or(|used| used > defined));
        }
        assert_eq!(draw_release.matches("local function give_back(").count(), 1);
    }
}
