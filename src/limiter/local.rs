//! An in-process limiter per client, for the answers an instance gives from memory (a sale it
//! knows to be sold out): cheap enough for the fast path, yet no client can ask at an unlimited
//! rate (which would let it probe, user id by user id, who bought).
//!
//! It is `governor`'s keyed GCRA, bounded: a key whose state has lapsed is dropped at least once
//! a second (`retain_recent`); and at [`MAX_CLIENTS`] live clients, every request it limits is
//! refused until lapsed ones make room (failing closed, as the Redis limiter does).

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::RateLimit;

/// Clients tracked at most.
pub const MAX_CLIENTS: usize = 100_000;
/// How often lapsed clients are dropped; when full, at most this often is tried again.
const RETAIN_EVERY_MS: u64 = 1_000;
const RETAIN_WHEN_FULL_MS: u64 = 100;
/// The wait announced when the table is full.
const FULL_RETRY: Duration = Duration::from_secs(1);

/// The limiter, keyed by the client's limiting key (`crate::limiter::client_key`).
pub struct LocalLimiter {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
    capacity: usize,
    started: Instant,
    last_retain_ms: AtomicU64,
    /// The clients refused, until when: what [`LocalLimiter::refused`] tells without spending.
    refused: moka::sync::Cache<IpAddr, Instant>,
}

impl std::fmt::Debug for LocalLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLimiter").field("clients", &self.limiter.len()).field("capacity", &self.capacity).finish()
    }
}

impl LocalLimiter {
    /// `rate.limit` requests back to back, then one per `rate.window / rate.limit`, per client;
    /// at most [`MAX_CLIENTS`] clients.
    pub fn new(rate: RateLimit) -> Self {
        Self::with_capacity(rate, MAX_CLIENTS)
    }

    /// The same, tracking at most `capacity` clients.
    pub fn with_capacity(rate: RateLimit, capacity: usize) -> Self {
        let burst = NonZeroU32::new(rate.limit).unwrap_or(NonZeroU32::MIN);
        let period = (rate.window / burst.get()).max(Duration::from_nanos(1));
        let quota = Quota::with_period(period).expect("a positive period").allow_burst(burst);
        Self {
            limiter: RateLimiter::keyed(quota),
            capacity,
            started: Instant::now(),
            last_retain_ms: AtomicU64::new(0),
            refused: moka::sync::Cache::builder()
                .max_capacity(capacity as u64)
                .time_to_live(rate.window.max(FULL_RETRY))
                .build(),
        }
    }

    /// Admits a request of `client`, or answers how long it must wait.
    pub fn check(&self, client: IpAddr) -> Result<(), Duration> {
        let full = self.limiter.len() >= self.capacity;
        self.tidy(full);
        if full && self.limiter.len() >= self.capacity {
            return Err(FULL_RETRY);
        }
        let wait = match self.limiter.check_key(&client) {
            Ok(()) => return Ok(()),
            Err(not_until) => not_until.wait_time_from(self.limiter.clock().now()),
        };
        self.refused.insert(client, Instant::now() + wait);
        Err(wait)
    }

    /// How long `client` must still wait, if its last request was refused and the wait has not
    /// passed: asked without spending a request.
    pub fn refused(&self, client: IpAddr) -> Option<Duration> {
        let until = self.refused.get(&client)?;
        until.checked_duration_since(Instant::now()).filter(|wait| !wait.is_zero())
    }

    /// Drops the lapsed clients, if it is time to (one caller at a time).
    fn tidy(&self, full: bool) {
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.last_retain_ms.load(Ordering::Relaxed);
        let every = if full { RETAIN_WHEN_FULL_MS } else { RETAIN_EVERY_MS };
        if now.saturating_sub(last) >= every
            && self.last_retain_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
        }
    }

    /// Clients currently tracked.
    pub fn len(&self) -> usize {
        self.limiter.len()
    }

    /// Whether no client is tracked.
    pub fn is_empty(&self) -> bool {
        self.limiter.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(i: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, i])
    }

    #[test]
    fn a_client_is_admitted_its_burst_then_refused_and_others_are_not() {
        let limiter = LocalLimiter::new(RateLimit { limit: 3, window: Duration::from_secs(60) });
        assert!((0..3).all(|_| limiter.check(ip(1)).is_ok()));
        let wait = limiter.check(ip(1)).unwrap_err();
        assert!(wait > Duration::from_secs(15) && wait <= Duration::from_secs(20), "{wait:?}");
        assert!(limiter.check(ip(2)).is_ok());
    }

    #[test]
    fn a_refusal_is_told_without_spending_until_its_wait_passes() {
        let limiter = LocalLimiter::new(RateLimit { limit: 1, window: Duration::from_millis(500) });
        assert_eq!(limiter.refused(ip(1)), None, "never asked");
        assert!(limiter.check(ip(1)).is_ok());
        assert_eq!(limiter.refused(ip(1)), None, "admitted, not refused");
        let wait = limiter.check(ip(1)).unwrap_err();
        let told = limiter.refused(ip(1)).expect("refused");
        assert!(told <= wait && !told.is_zero(), "{told:?} of {wait:?}");
        std::thread::sleep(wait + Duration::from_millis(5));
        assert_eq!(limiter.refused(ip(1)), None, "the wait passed");
        assert!(limiter.check(ip(1)).is_ok(), "asking did not spend");
    }

    #[test]
    fn the_clients_tracked_are_bounded_and_lapsed_ones_make_room() {
        let limiter = LocalLimiter::with_capacity(RateLimit { limit: 1, window: Duration::from_millis(300) }, 3);
        for i in 0..3 {
            assert!(limiter.check(ip(i)).is_ok());
        }
        assert_eq!(limiter.check(ip(9)), Err(FULL_RETRY), "full: refused");
        assert_eq!(limiter.len(), 3);
        // governor keeps a key until its state is a burst's tolerance past its theoretical time.
        std::thread::sleep(Duration::from_millis(1_000));
        assert!(limiter.check(ip(9)).is_ok(), "lapsed clients made room");
        assert!(limiter.len() <= 1);
    }
}
