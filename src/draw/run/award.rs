//! The run's Redis side: the entries closed (the draw meta's state), the winners' reservations
//! made in chunks (`lua/draw_award.lua`), the draw revealed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::{AsyncCommands, RedisResult, Value};

use super::store;
use crate::domain::DropId;
use crate::draw::Outcome;
use crate::redis::Keyspace;
use crate::redis::keys::DropKeys;
use crate::redis::lua::{self, unexpected_reply};

/// Most winners one `lua/draw_award.lua` call awards: each costs the purchase's few writes (some
/// 30 µs), so a call holds Redis well under 50 ms (`cargo xtask load k6-draw` checks the slowest).
pub const CHUNK: usize = 250;

/// How far an award got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Awarded {
    /// Redis calls made.
    pub calls: usize,
    /// Winners given a reservation by these calls.
    pub made: usize,
    /// Winners who had theirs already (an earlier, interrupted run's).
    pub had: usize,
    /// The longest call, as this process timed it (the round trip: Redis's own time is less).
    pub slowest: Duration,
    /// Every winner is awarded (false: stopped at the chunks asked).
    pub done: bool,
}

/// Why an award was not made.
#[derive(Debug, thiserror::Error)]
pub enum AwardError {
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// The purchase's rules refused a winner (the size ended, was paused, lost its stock...).
    #[error("size {size}: winner {user} was not awarded: {reply}")]
    Refused { size: String, user: String, reply: String },
}

/// The draw meta's state (`open`, `drawing`, `drawn`), `None` without a draw meta; and the
/// entries Redis accepted (the entries hash's length).
pub async fn state(redis: &Keyspace, drop: &DropId) -> RedisResult<(Option<String>, u64)> {
    let keys = DropKeys::new(redis.prefix(), drop);
    redis::pipe().atomic().hget(&keys.draw, "state").hlen(&keys.entries).query_async(&mut redis.conn()).await
}

/// Sets the draw meta's state to `state` if it has a meta and is not `drawn` already:
/// `lua/draw_enter.lua` refuses entries as closed from then on.
pub async fn set_state(redis: &Keyspace, drop: &DropId, state: &str) -> RedisResult<()> {
    let keys = DropKeys::new(redis.prefix(), drop);
    let (now, _) = self::state(redis, drop).await?;
    if now.as_deref().is_some_and(|now| now != "drawn" && now != state) {
        let _: i64 = redis.conn().hset(&keys.draw, "state", state).await?;
    }
    Ok(())
}

/// Awards the winners of `results` their reservations, per size in chunks of [`CHUNK`], at most
/// `max_calls` calls (`None`: all). A winner awarded before answers `already_purchased` and is
/// counted in [`Awarded::had`].
pub async fn award(
    redis: &Keyspace,
    drop: &DropId,
    results: &[store::Result],
    max_calls: Option<usize>,
) -> Result<Awarded, AwardError> {
    let mut by_size: BTreeMap<&str, Vec<(usize, &store::Result)>> = BTreeMap::new();
    let winners = results.iter().filter(|r| matches!(r.outcome, Outcome::Won { .. }));
    for (n, result) in winners.enumerate() {
        if let Outcome::Won { size, .. } = &result.outcome {
            by_size.entry(size).or_default().push((n + 1, result));
        }
    }
    let mut awarded = Awarded::default();
    if !by_size.is_empty() {
        // Loaded first, so no award call pays the script's compilation.
        let _: String = lua::DRAW_AWARD.prepare_invoke().load_async(&mut redis.conn()).await?;
    }
    for (size, winners) in by_size {
        let sale = drop.size(size).map_err(|why| unexpected_reply("a draw result's size", &why))?;
        let keys = redis.sale_keys(&sale);
        for chunk in winners.chunks(CHUNK) {
            if max_calls.is_some_and(|max| awarded.calls >= max) {
                return Ok(awarded);
            }
            let mut call = lua::DRAW_AWARD.prepare_invoke();
            for key in keys.all() {
                call.key(key);
            }
            call.arg(sale.as_str()).arg(chunk.len());
            for (n, winner) in chunk {
                let order = winner.order_id.map(|id| id.to_string()).unwrap_or_default();
                call.arg(winner.user.as_str()).arg(order).arg(*n).arg(winner.quantity);
            }
            let started = Instant::now();
            let replies: Vec<Value> = lua::run(&call, &mut redis.conn()).await?;
            awarded.slowest = awarded.slowest.max(started.elapsed());
            awarded.calls += 1;
            for ((_, winner), reply) in chunk.iter().zip(&replies) {
                match first_word(reply).as_deref() {
                    Some("reserved" | "ok") => awarded.made += 1,
                    Some("already_purchased") => awarded.had += 1,
                    _ => {
                        let (size, user) = (size.to_owned(), winner.user.to_string());
                        return Err(AwardError::Refused { size, user, reply: format!("{reply:?}") });
                    }
                }
            }
        }
    }
    awarded.done = true;
    Ok(awarded)
}

/// A script reply's status: the string, or an array's first element.
fn first_word(reply: &Value) -> Option<String> {
    match reply {
        Value::Array(parts) => parts.first().and_then(|part| redis::from_redis_value_ref(part).ok()),
        other => redis::from_redis_value_ref(other).ok(),
    }
}
