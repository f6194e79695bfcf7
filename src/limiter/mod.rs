//! The rate limiters in front of `POST /buy`: five algorithms ([`Algorithm`]), one Lua script
//! each (`lua/<algorithm>.lua`), one contract, and the IETF `RateLimit` header fields. One
//! policy holds each client (its address, an IPv6 address grouped by network: [`client_key`]),
//! another, if set, each buyer ([`Scope::buyer_gate`]); each [`Gate`] checks one key; [`local`]
//! limits the answers given from memory to a sale known sold out.
//!
//! Every script takes `KEYS[1]` = the client's (or buyer's) key and `ARGV` = limit, window_ms, burst, nonce
//! (and, in tests only, the time), and answers `{allowed, remaining, retry_after_us, reset_us}`
//! from Redis `TIME`. Refused requests are never stored, so a refusal's `retry_after` is exact:
//! no request from that client can be admitted sooner, and [`Limiter`] answers it from memory
//! until then. When Redis cannot answer, the limiter fails closed (503): the purchase behind it
//! needs Redis anyway, and an unlimited `/buy` is what the limiter exists to prevent.

mod algorithm;
mod client_key;
mod gate;
pub mod local;
mod memory;

use std::net::IpAddr;
use std::time::Duration;

use redis::{RedisResult, ScriptInvocation};
use uuid::Uuid;

use crate::redis::Keyspace;
use crate::redis::keys::rate_limit_key;

pub use algorithm::Algorithm;
pub use client_key::{DEFAULT_IPV6_PREFIX, client_key};
pub use gate::{Gate, Scope};
pub use memory::Limiter;

/// The name of the per-client-address quota policy, as both header fields carry it.
const POLICY_NAME: &str = "buy";
/// The name of the per-buyer quota policy.
const BUYER_POLICY_NAME: &str = "buyer";

/// Largest `limit` and `burst`.
pub const MAX_LIMIT: u32 = 1_000_000;
/// Longest window.
pub const MAX_WINDOW: Duration = Duration::from_secs(3600);
/// Largest `limit` (and `burst`) x window in microseconds: the scripts' integers then stay below
/// 2^53, where Lua's doubles are exact (the sliding counter doubles it, the rest adds a little).
/// Allows 1,000,000/1s and 300,000/1h.
pub const MAX_LIMIT_TIMES_WINDOW_US: u128 = 1 << 50;

/// A rate: `limit` requests per `window` (what exactly that admits depends on the algorithm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per window.
    pub limit: u32,
    /// The window.
    pub window: Duration,
}

/// A validated limiter setting: `limit` requests per `window`, and `burst` for the bucket
/// algorithms (equal to `limit` for the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How the limit is enforced.
    pub algorithm: Algorithm,
    /// Requests per window, 1 to [`MAX_LIMIT`].
    pub limit: u32,
    /// Whole milliseconds, up to [`MAX_WINDOW`].
    pub window: Duration,
    /// Requests admitted back to back (token bucket, GCRA); `limit` for the others.
    pub burst: u32,
    /// The policy's name in the header fields: `buy` (per client address) or `buyer`.
    pub name: &'static str,
}

impl Policy {
    /// Checks the bounds; `burst` is refused for algorithms without one.
    pub fn new(algorithm: Algorithm, rate: RateLimit, burst: Option<u32>) -> Result<Self, String> {
        let RateLimit { limit, window } = rate;
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(format!("the rate limit's REQUESTS must be 1-{MAX_LIMIT}, got {limit}"));
        }
        if window.is_zero() || window > MAX_WINDOW || window.subsec_nanos() % 1_000_000 != 0 {
            return Err(format!("the rate limit's WINDOW must be whole milliseconds from 1ms to 1h, got {window:?}"));
        }
        let too_big = |n: u32| u128::from(n) * window.as_micros() > MAX_LIMIT_TIMES_WINDOW_US;
        if too_big(limit) {
            return Err(format!(
                "REQUESTS x WINDOW is too large ({limit} per {window:?}): at most 2^50 requests x microseconds, e.g. \
                    1000000/1s or 300000/1h"
            ));
        }
        if burst.is_some() && !algorithm.has_burst() {
            return Err(format!("a burst applies to token-bucket and gcra only, not to {algorithm}"));
        }
        let burst = burst.unwrap_or(limit);
        if !(1..=MAX_LIMIT).contains(&burst) || too_big(burst) {
            return Err(format!(
                "the burst must be 1-{MAX_LIMIT} and burst x WINDOW at most 2^50 microseconds, got {burst}"
            ));
        }
        Ok(Self { algorithm, limit, window, burst, name: POLICY_NAME })
    }

    /// The script call for the client key `key`. `now_us` replaces Redis `TIME`: tests only.
    pub fn invocation(&self, key: &str, nonce: &str, now_us: Option<u64>) -> ScriptInvocation<'static> {
        let mut call = self.algorithm.script().key(key);
        self.push_args(&mut call, nonce, now_us);
        call
    }

    /// Appends the scripts' ARGV: limit, window_ms, burst, nonce, and `now_us` (tests only;
    /// empty for Redis `TIME`). `lua/buy_limited.lua` takes the same five per limit.
    pub fn push_args(&self, call: &mut ScriptInvocation<'_>, nonce: &str, now_us: Option<u64>) {
        call.arg(self.limit).arg(self.window.as_millis() as u64).arg(self.burst).arg(nonce);
        match now_us {
            Some(now) => call.arg(now),
            None => call.arg(""),
        };
    }

    /// The same policy as the per-buyer limit: named `buyer` in the header fields.
    pub fn for_buyers(self) -> Self {
        Self { name: BUYER_POLICY_NAME, ..self }
    }

    /// Runs the policy's script for `client` (its limiting key, see [`client_key`]) in `redis`,
    /// on its global key, in a call of its own: admits and records the request, or refuses it
    /// (writing nothing). The routes go through [`Gate`]s.
    pub async fn check(&self, redis: &Keyspace, client: IpAddr) -> RedisResult<Decision> {
        let key = rate_limit_key(redis.prefix(), self.algorithm.name(), client);
        Gate { policy: self, key }.check(&mut redis.conn(), &Uuid::now_v7().simple().to_string()).await
    }

    /// The `RateLimit-Policy` field's value (draft-ietf-httpapi-ratelimit-headers), e.g.
    /// `"buy";q=20;w=1`. The field counts whole seconds, so a sub-second window is announced as
    /// one second: `q` per `w` is never more than allowed.
    pub fn policy_field(&self) -> String {
        format!("\"{}\";q={};w={}", self.name, self.limit, ceil_secs(self.window).max(1))
    }

    /// The `RateLimit` field's value for `decision` under this policy: the remaining quota and
    /// the seconds until it resets, e.g. `"buy";r=5;t=1` (`t` in whole seconds, rounded up).
    pub fn state_field(&self, decision: &Decision) -> String {
        format!("\"{}\";r={};t={}", self.name, decision.remaining, ceil_secs(decision.reset))
    }
}

/// One limiter decision, as the script answered it (or as remembered from a refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// Requests still admitted right now.
    pub remaining: u32,
    /// Zero when allowed; otherwise the exact wait until a request would be admitted.
    pub retry_after: Duration,
    /// Wait until the client's whole quota is available again.
    pub reset: Duration,
}

impl Decision {
    /// From the scripts' reply `{allowed, remaining, retry_after_us, reset_us}`.
    pub fn from_reply((allowed, remaining, retry_after_us, reset_us): (i64, i64, i64, i64)) -> Self {
        let micros = |us: i64| Duration::from_micros(us.max(0) as u64);
        Self {
            allowed: allowed == 1,
            remaining: remaining.clamp(0, i64::from(u32::MAX)) as u32,
            retry_after: micros(retry_after_us),
            reset: micros(reset_us),
        }
    }
}

/// `d` in whole seconds, rounded up.
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_micros().div_ceil(1_000_000) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(algorithm: Algorithm, limit: u32, window_ms: u64, burst: Option<u32>) -> Result<Policy, String> {
        Policy::new(algorithm, RateLimit { limit, window: Duration::from_millis(window_ms) }, burst)
    }

    #[test]
    fn bounds_and_burst_are_checked() {
        assert!(policy(Algorithm::Gcra, 20, 1000, Some(5)).is_ok());
        assert_eq!(policy(Algorithm::TokenBucket, 20, 1000, None).unwrap().burst, 20);
        assert!(policy(Algorithm::SlidingLog, 20, 1000, Some(5)).is_err(), "no burst for a window");
        assert!(policy(Algorithm::FixedWindow, MAX_LIMIT + 1, 1000, None).is_err());
        assert!(policy(Algorithm::FixedWindow, 1, 3_600_001, None).is_err());
        assert!(policy(Algorithm::SlidingLog, 1_000_000, 1000, None).is_ok());
        assert!(policy(Algorithm::SlidingLog, 300_000, 3_600_000, None).is_ok());
        assert!(policy(Algorithm::SlidingLog, 400_000, 3_600_000, None).is_err(), "product over 2^50");
        assert!(policy(Algorithm::Gcra, 10, 3_600_000, Some(400_000)).is_err(), "burst product over 2^50");
        assert!(policy(Algorithm::Gcra, 1, 1000, Some(0)).is_err());
        let sub_ms = RateLimit { limit: 1, window: Duration::from_micros(1500) };
        assert!(Policy::new(Algorithm::Gcra, sub_ms, None).is_err());
    }

    #[test]
    fn header_values_follow_the_draft_syntax() {
        let p = policy(Algorithm::SlidingLog, 20, 1000, None).unwrap();
        assert_eq!(p.policy_field(), "\"buy\";q=20;w=1");
        assert_eq!(policy(Algorithm::SlidingLog, 5, 250, None).unwrap().policy_field(), "\"buy\";q=5;w=1");
        assert_eq!(policy(Algorithm::SlidingLog, 5, 90_000, None).unwrap().policy_field(), "\"buy\";q=5;w=90");
        let d = Decision::from_reply((0, 0, 1_500, 1_000_001));
        assert_eq!(p.state_field(&d), "\"buy\";r=0;t=2");
        assert_eq!(p.state_field(&Decision::from_reply((1, 3, 0, 0))), "\"buy\";r=3;t=0");
        assert_eq!(p.for_buyers().policy_field(), "\"buyer\";q=20;w=1");
        assert_eq!(p.for_buyers().state_field(&d), "\"buyer\";r=0;t=2");
    }
}
