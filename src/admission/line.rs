//! One read of a line (a queued sale's or a drop's) (`lua/admit.lua`'s reply) and where a buyer stands in it,
//! worked out in-process: a crowd's polls cost no Redis call once the instance has a read.

use std::time::Instant;

use redis::{RedisResult, Value};

use crate::redis::lua::unexpected_reply;

/// How far a queued sale's admission got, as one instance last read it.
#[derive(Debug, Clone)]
pub struct Line {
    /// The Redis server's clock at the read, Unix ms.
    redis_time_ms: i64,
    /// This instance's monotonic clock at the read.
    taken: Instant,
    /// When the pre-queue opened (opens), Unix ms (`None`: the meta has no such field).
    pub opens_at_ms: Option<i64>,
    pub starts_at_ms: i64,
    pub ends_at_ms: Option<i64>,
    /// Buyers admitted per second.
    pub rate: u64,
    /// Milliseconds an admitted buyer has to buy.
    pub ttl_ms: i64,
    /// Places 1..=upto are admitted.
    pub upto: u64,
    /// Places 1..=lapsed were admitted more than `ttl_ms` ago.
    pub lapsed: u64,
    /// Places handed out so far.
    pub places: u64,
    /// Units left: the sale's, or the sum of the drop's sizes'.
    pub stock_left: i64,
    /// The proof of work a join asks (tries on average); `None`: none.
    pub challenge_cost: Option<u32>,
    /// The line's shuffle seed with its state's epoch (`lua/admit.lua`): new when the line starts
    /// again from nothing, a repair after a loss included, so a ticket is signed with it
    /// (`crate::admission::token::Signer::ticket`).
    pub seed: String,
    /// `(upto, admitted at)`: place p was admitted at the time of the first pair with upto >= p.
    admits: Vec<(u64, i64)>,
}

/// Where a buyer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stand {
    /// Joined before the start: no place yet.
    Prequeue,
    /// Has a place, not yet admitted.
    Waiting,
    /// Admitted: may buy until `expires_ms`.
    Admitted { expires_ms: i64 },
    /// Not admitted, and the sale has no stock left (admission resumes if units come back).
    SoldOut,
    /// The sale has ended, or the buyer's admission lapsed unused.
    Closed,
}

/// A buyer's standing, as `GET /sales/{id}/queue` tells it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub stand: Stand,
    /// The buyer's place (1 = first); `None` in the pre-queue.
    pub position: Option<u64>,
    /// Places before the buyer's not yet admitted.
    pub ahead: Option<u64>,
    /// Seconds until admission at the sale's rate, if nothing stops it.
    pub wait_s: Option<u64>,
    /// When to ask again, seconds.
    pub refresh_after_s: f64,
    /// The Redis server's clock now, Unix ms.
    pub server_time_ms: i64,
}

impl Line {
    /// Reads admit.lua's reply (already known not to be a status word).
    pub fn from_reply(reply: Value) -> RedisResult<Self> {
        let bad = |why: &str| unexpected_reply("admit.lua", why);
        let Value::Array(mut parts) = reply else { return Err(bad("not an array")) };
        if parts.len() != 13 {
            return Err(bad(&format!("{} parts", parts.len())));
        }
        let opens_at_ms: i64 = redis::from_redis_value(parts.pop().expect("thirteen parts"))?;
        let seed: String = redis::from_redis_value(parts.pop().expect("thirteen parts"))?;
        let cost: i64 = redis::from_redis_value(parts.pop().expect("thirteen parts"))?;
        let list: Vec<i64> = redis::from_redis_value(parts.pop().expect("thirteen parts"))?;
        let n: Vec<i64> = parts.iter().map(redis::from_redis_value_ref).collect::<Result<_, _>>()?;
        let count = |v: i64| u64::try_from(v).map_err(|_| bad("a negative count"));
        Ok(Self {
            redis_time_ms: n[0],
            taken: Instant::now(),
            upto: count(n[1])?,
            lapsed: count(n[2])?,
            places: count(n[3])?,
            stock_left: n[4],
            opens_at_ms: (opens_at_ms >= 0).then_some(opens_at_ms),
            starts_at_ms: n[5],
            ends_at_ms: (n[6] >= 0).then_some(n[6]),
            rate: count(n[7])?.max(1),
            ttl_ms: n[8],
            challenge_cost: u32::try_from(cost).ok().filter(|&cost| cost > 0),
            seed,
            admits: list.chunks_exact(2).map(|pair| (pair[0].max(0) as u64, pair[1])).collect(),
        })
    }

    /// The Redis server's clock now, as this instance estimates it.
    pub fn server_time_ms(&self) -> i64 {
        self.redis_time_ms + i64::try_from(self.taken.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// The line's shuffle seed alone (64 hex digits; `seed` without its epoch), "" if none.
    pub fn shuffle_seed(&self) -> &str {
        self.seed.split_once('/').map_or(self.seed.as_str(), |(seed, _)| seed)
    }

    /// Whether the pre-queue is closed (places are known).
    pub fn started(&self) -> bool {
        self.server_time_ms() >= self.starts_at_ms
    }

    /// When place `place` was admitted, if it was and its window is still listed.
    fn admitted_at(&self, place: u64) -> Option<i64> {
        let i = self.admits.partition_point(|(upto, _)| *upto < place);
        self.admits.get(i).map(|(_, at)| *at)
    }

    /// Where the buyer at `place` stands (`None`: in the pre-queue, no place yet). `spread` in
    /// [0, 1) is the buyer's own share of a second: pre-queue buyers told to come back at the
    /// start come back spread over that second, not all at once.
    pub fn standing(&self, place: Option<u64>, spread: f64) -> Standing {
        let now = self.server_time_ms();
        let mut standing = Standing {
            stand: Stand::Closed,
            position: place,
            ahead: None,
            wait_s: None,
            refresh_after_s: 60.0,
            server_time_ms: now,
        };
        if self.ends_at_ms.is_some_and(|end| now >= end) {
            return standing;
        }
        let Some(place) = place.filter(|_| now >= self.starts_at_ms) else {
            let to_start = (self.starts_at_ms - now).max(0) as f64 / 1000.0;
            standing.stand = Stand::Prequeue;
            standing.position = None;
            standing.refresh_after_s = if to_start > 30.0 { 30.0 } else { to_start + spread };
            return standing;
        };
        if place <= self.upto {
            standing.ahead = Some(0);
            standing.wait_s = Some(0);
            let expires_ms = self.admitted_at(place).filter(|_| place > self.lapsed).map(|at| at + self.ttl_ms);
            if let Some(expires_ms) = expires_ms.filter(|&expires| expires > now) {
                standing.stand = Stand::Admitted { expires_ms };
                standing.refresh_after_s = ((expires_ms - now) as f64 / 1000.0).min(30.0);
            }
            return standing;
        }
        let ahead = place - self.upto - 1;
        standing.ahead = Some(ahead);
        standing.wait_s = Some((ahead + 1).div_ceil(self.rate));
        if self.stock_left <= 0 {
            standing.stand = Stand::SoldOut;
            standing.refresh_after_s = 5.0;
        } else {
            standing.stand = Stand::Waiting;
            standing.refresh_after_s = ((ahead + 1) as f64 / self.rate as f64 / 2.0).clamp(1.0, 15.0);
        }
        standing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(now: i64, upto: u64, lapsed: u64, stock: i64, admits: Vec<(u64, i64)>) -> Line {
        Line {
            redis_time_ms: now,
            taken: Instant::now(),
            opens_at_ms: Some(0),
            starts_at_ms: 10_000,
            ends_at_ms: Some(1_000_000),
            rate: 10,
            ttl_ms: 60_000,
            upto,
            lapsed,
            places: 100,
            stock_left: stock,
            challenge_cost: None,
            seed: String::new(),
            admits,
        }
    }

    #[test]
    fn before_the_start_nobody_has_a_place() {
        let standing = line(4_000, 0, 0, 5, vec![]).standing(None, 0.5);
        assert_eq!(standing.stand, Stand::Prequeue);
        assert_eq!((standing.position, standing.ahead, standing.wait_s), (None, None, None));
        assert!((standing.refresh_after_s - 6.5).abs() < 0.1, "{}", standing.refresh_after_s);
    }

    #[test]
    fn places_are_admitted_in_order_with_the_time_of_their_batch() {
        let l = line(20_000, 30, 0, 5, vec![(10, 11_000), (30, 12_000)]);
        assert_eq!(l.standing(Some(5), 0.0).stand, Stand::Admitted { expires_ms: 71_000 });
        assert_eq!(l.standing(Some(10), 0.0).stand, Stand::Admitted { expires_ms: 71_000 });
        assert_eq!(l.standing(Some(11), 0.0).stand, Stand::Admitted { expires_ms: 72_000 });
        let waiting = l.standing(Some(55), 0.0);
        assert_eq!(waiting.stand, Stand::Waiting);
        assert_eq!((waiting.position, waiting.ahead, waiting.wait_s), (Some(55), Some(24), Some(3)));
    }

    #[test]
    fn a_lapsed_or_expired_admission_is_closed_and_sold_out_stops_the_wait() {
        let l = line(75_000, 30, 10, 0, vec![(30, 12_000)]);
        assert_eq!(l.standing(Some(3), 0.0).stand, Stand::Closed, "lapsed");
        assert_eq!(l.standing(Some(20), 0.0).stand, Stand::Closed, "past its window");
        assert_eq!(l.standing(Some(31), 0.0).stand, Stand::SoldOut);
        let ended = line(2_000_000, 30, 0, 5, vec![(30, 1_999_000)]);
        assert_eq!(ended.standing(Some(3), 0.0).stand, Stand::Closed);
    }
}
