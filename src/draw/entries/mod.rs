//! A draw's entries, their Redis side: a buyer's one entry (`lua/draw_enter.lua`: kept in the
//! draw's entries hash and appended to its entry stream in one call), a buyer's entry read back,
//! the draw's public figures, and the entry streams the order worker copies to Postgres
//! (`stream`, `store`). Every key is in the drop's slot (`crate::redis::keys::DropKeys`).

pub mod store;
pub mod stream;

use redis::{AsyncCommands, RedisResult, Value};

use crate::challenge::Spent;
use crate::domain::{DropId, UserId};
use crate::redis::Keyspace;
use crate::redis::keys::{DropKeys, LineKeys};
use crate::redis::lua::{self, unexpected_reply};

/// Most sizes one entry ranks.
pub const MAX_SIZES: usize = 6;

/// One buyer's entry: the sizes it wants, best first (short names: `42` for `<drop>.42`), the
/// units, and when Redis accepted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub sizes: Vec<String>,
    pub quantity: u32,
    /// Redis time, Unix ms.
    pub entered_at_ms: i64,
}

impl Entry {
    /// An entry as the entries hash keeps it: `"<sizes comma-joined> <quantity> <entered_ms>"`.
    pub fn parse(kept: &str) -> Option<Self> {
        let mut words = kept.split(' ');
        let sizes = words.next()?.split(',').map(str::to_owned).collect();
        let quantity = words.next()?.parse().ok()?;
        let entered_at_ms = words.next()?.parse().ok()?;
        words.next().is_none().then_some(Self { sizes, quantity, entered_at_ms })
    }
}

/// What `lua/draw_enter.lua` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entered {
    /// Accepted: kept and streamed.
    Entered(Entry),
    /// The buyer entered before: that entry (nothing written).
    Duplicate(Entry),
    /// The drop has no draw (not in draw mode, or not seeded).
    Unknown,
    /// A size is not the drop's, or the quantity is over its limit: why (nothing written).
    Invalid(String),
    NotOpen,
    Closed,
    ChallengeRequired,
    ChallengeReplayed,
}

/// The draw's figures as its meta holds them, and its entries so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawInfo {
    /// SHA-256 of the secret seed's 64 hex digits, hex.
    pub commitment: String,
    pub opens_at_ms: i64,
    pub closes_at_ms: i64,
    /// `open`, `drawing` or `drawn`.
    pub state: String,
    /// Entries accepted (the entries hash's length).
    pub entries: u64,
    /// The proof of work an entry asks, if any.
    pub challenge_cost: Option<u32>,
    /// The seed, once the draw is drawn (revealed: read from Postgres by the caller, never kept in
    /// Redis); `None` before.
    pub seed: Option<String>,
}

/// Enters `user` in the drop's draw with `sizes` (best first, checked by the caller: 1 to
/// [`MAX_SIZES`] distinct size names) and `quantity`, spending `spent` (a verified proof of work)
/// in the same call.
pub async fn enter(
    redis: &Keyspace,
    drop: &DropId,
    user: &UserId,
    (sizes, quantity): (&[String], u32),
    spent: Option<&Spent>,
) -> RedisResult<Entered> {
    let keys = DropKeys::new(redis.prefix(), drop);
    let challenges = LineKeys::of_drop(redis.prefix(), drop.as_str()).challenges;
    let mut call = lua::DRAW_ENTER.key(&keys.draw);
    call.key(&keys.entries).key(&keys.entry_stream).key(&challenges);
    call.arg(user.as_str()).arg(sizes.join(",")).arg(quantity);
    match spent {
        Some(spent) => call.arg(&spent.nonce).arg(spent.expires_ms),
        None => call.arg("").arg(""),
    };
    let reply: Value = lua::run(&call, &mut redis.conn()).await?;
    let bad = || unexpected_reply("draw_enter.lua", &format!("{reply:?}"));
    if let Value::Array(parts) = &reply {
        let words: Vec<String> = parts.iter().map(redis::from_redis_value_ref).collect::<Result<_, _>>()?;
        return match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["entered", ms] => Ok(Entered::Entered(Entry {
                sizes: sizes.to_vec(),
                quantity,
                entered_at_ms: ms.parse().map_err(|_| bad())?,
            })),
            ["duplicate", kept] => Ok(Entered::Duplicate(Entry::parse(kept).ok_or_else(bad)?)),
            ["invalid", why] => Ok(Entered::Invalid(why.to_owned())),
            _ => Err(bad()),
        };
    }
    Ok(match redis::from_redis_value_ref::<String>(&reply)?.as_str() {
        "unknown" => Entered::Unknown,
        "not_open" => Entered::NotOpen,
        "closed" => Entered::Closed,
        "challenge_required" => Entered::ChallengeRequired,
        "challenge_replayed" => Entered::ChallengeReplayed,
        _ => return Err(bad()),
    })
}

/// The buyer's entry in the drop's draw, `None` if it has none.
pub async fn entry(redis: &Keyspace, drop: &DropId, user: &UserId) -> RedisResult<Option<Entry>> {
    let kept: Option<String> = redis.conn().hget(DropKeys::new(redis.prefix(), drop).entries, user.as_str()).await?;
    kept.map(|kept| Entry::parse(&kept).ok_or_else(|| unexpected_reply("the draw's entries hash", &kept))).transpose()
}

/// The drop's draw, `None` if the drop is not in draw mode: its meta and its entries' count, in
/// one atomic read of the drop's slot.
pub async fn info(redis: &Keyspace, drop: &DropId) -> RedisResult<Option<DrawInfo>> {
    let keys = DropKeys::new(redis.prefix(), drop);
    let fields = ["commitment", "opens_at_ms", "closes_at_ms", "state", "challenge_cost"];
    let (meta, entries): (Vec<Option<String>>, u64) = redis::pipe()
        .atomic()
        .cmd("HMGET")
        .arg(&keys.draw)
        .arg(&fields)
        .hlen(&keys.entries)
        .query_async(&mut redis.conn())
        .await?;
    let [commitment, opens, closes, state, cost] = <[Option<String>; 5]>::try_from(meta)
        .map_err(|meta| unexpected_reply("the draw's meta", &format!("{meta:?}")))?;
    let (Some(commitment), Some(opens), Some(closes)) = (commitment, opens, closes) else { return Ok(None) };
    let ms = |raw: &str| raw.parse::<i64>().map_err(|_| unexpected_reply("the draw's meta", raw));
    Ok(Some(DrawInfo {
        commitment,
        opens_at_ms: ms(&opens)?,
        closes_at_ms: ms(&closes)?,
        state: state.unwrap_or_else(|| "open".into()),
        entries,
        challenge_cost: cost.and_then(|c| c.parse().ok()).filter(|&c| c > 0),
        seed: None,
    }))
}
