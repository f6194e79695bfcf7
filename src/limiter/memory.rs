//! The refused clients (or buyers) one instance remembers, so that it answers them 429 without
//! asking Redis again until the limiter could admit them.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Instant;

use super::{Decision, Policy};

/// Remembered refusals at most; beyond, lapsed ones are dropped first, and if none has lapsed
/// the refused one is not remembered (Redis still decides). A full memory is scanned for lapsed
/// ones not before the earliest remembered refusal ends, when a scan could free nothing, and at
/// most once per [`SCAN_PAUSE`], when refusals lapse one by one all the time (so a flood of new
/// refusals costs a lookup each, not a scan of 100,000 under the lock every purchase reads).
const MAX_REMEMBERED: usize = 100_000;

/// The least time between two scans of a full memory.
const SCAN_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// The limiter one instance runs: its policy and whom it refused recently, by the limiter key
/// the refusal came from ([`super::Gate::key`]), which names the client (or buyer) and, under
/// `SECKILL_RATE_LIMIT_SCOPE=sale`, the sale.
#[derive(Debug)]
pub struct Limiter {
    /// The policy every client is held to.
    pub policy: Policy,
    refused: RwLock<Refused>,
    capacity: usize,
}

/// The refusals remembered, by limiter key.
#[derive(Debug, Default)]
struct Refused {
    by_key: HashMap<String, Refusal>,
    /// None of `by_key` lapses before this (`None`: not known): while it is ahead, a scan for
    /// lapsed refusals would find none.
    lapses_from: Option<Instant>,
    /// No scan before this (the last scan's time and [`SCAN_PAUSE`]).
    next_scan: Option<Instant>,
    /// Scans made for lapsed refusals (what the tests count).
    #[cfg(test)]
    scans: usize,
}

/// Until when a refused client is refused, and until when its quota is not whole.
#[derive(Debug, Clone, Copy)]
struct Refusal {
    retry_at: Instant,
    reset_at: Instant,
}

impl Limiter {
    /// A limiter remembering up to 100,000 refusals.
    pub fn new(policy: Policy) -> Self {
        Self::with_capacity(policy, MAX_REMEMBERED)
    }

    /// Remembers at most `capacity` refusals.
    pub fn with_capacity(policy: Policy, capacity: usize) -> Self {
        Self { policy, refused: RwLock::default(), capacity }
    }

    /// The refusal of `client` this instance still remembers, if it has not lapsed.
    pub fn remembered(&self, client: &str) -> Option<Decision> {
        let refusal = *self.refused.read().unwrap_or_else(|e| e.into_inner()).by_key.get(client)?;
        let now = Instant::now();
        let retry_after = refusal.retry_at.checked_duration_since(now).filter(|d| !d.is_zero())?;
        let reset = refusal.reset_at.saturating_duration_since(now);
        Some(Decision { allowed: false, remaining: 0, retry_after, reset })
    }

    /// Remembers Redis's refusal of `client`, counted from `asked`, taken before the script
    /// call was sent: Redis decided later, so `asked + retry_after` is never after the moment
    /// the client may be admitted again.
    pub fn remember(&self, client: &str, asked: Instant, decision: &Decision) {
        let refusal = Refusal { retry_at: asked + decision.retry_after, reset_at: asked + decision.reset };
        let now = Instant::now();
        let mut refused = self.refused.write().unwrap_or_else(|e| e.into_inner());
        let refused = &mut *refused;
        if refused.by_key.len() >= self.capacity && !refused.by_key.contains_key(client) {
            if refused.lapses_from.is_some_and(|at| now < at) || refused.next_scan.is_some_and(|at| now < at) {
                return;
            }
            refused.next_scan = Some(now + SCAN_PAUSE);
            let mut earliest: Option<Instant> = None;
            refused.by_key.retain(|_, r| {
                let live = r.retry_at > now;
                if live {
                    earliest = Some(earliest.map_or(r.retry_at, |at| at.min(r.retry_at)));
                }
                live
            });
            refused.lapses_from = earliest;
            #[cfg(test)]
            {
                refused.scans += 1;
            }
            if refused.by_key.len() >= self.capacity {
                return;
            }
        }
        // Kept a lower bound of every refusal's end, the one replaced included.
        if let Some(at) = &mut refused.lapses_from {
            *at = (*at).min(refusal.retry_at);
        }
        refused.by_key.insert(client.to_owned(), refusal);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limiter::{Algorithm, RateLimit};

    fn policy() -> Policy {
        Policy::new(Algorithm::SlidingLog, RateLimit { limit: 1, window: Duration::from_secs(1) }, None).unwrap()
    }

    #[test]
    fn a_refused_client_is_remembered_until_its_retry_time_and_no_longer() {
        let limiter = Limiter::new(policy());
        let (a, b) = ("p:ratelimit:sliding-log:{192.0.2.1}", "p:ratelimit:sliding-log:{192.0.2.2}");
        assert_eq!(limiter.remembered(a), None);
        // Waits long enough that a loaded host's pause between two lines does not outlast them.
        let refusal = Decision::from_reply((0, 0, 300_000, 500_000));
        limiter.remember(a, Instant::now(), &refusal);
        let remembered = limiter.remembered(a).expect("remembered");
        assert!(remembered.retry_after <= Duration::from_millis(300) && !remembered.allowed);
        assert!(remembered.reset > remembered.retry_after);
        assert_eq!(limiter.remembered(b), None);
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(limiter.remembered(a), None);
    }

    #[test]
    fn memory_is_bounded_and_lapsed_clients_make_room() {
        let limiter = Limiter::with_capacity(policy(), 3);
        let ip = |i: u8| format!("p:ratelimit:sliding-log:{{192.0.2.{i}}}");
        let short = Decision::from_reply((0, 0, 300_000, 300_000));
        let long = Decision::from_reply((0, 0, 60_000_000, 60_000_000));
        for i in 0..3 {
            limiter.remember(&ip(i), Instant::now(), &short);
        }
        limiter.remember(&ip(3), Instant::now(), &long);
        assert_eq!(limiter.remembered(&ip(3)), None, "full: not remembered");
        std::thread::sleep(Duration::from_millis(400));
        limiter.remember(&ip(3), Instant::now(), &long);
        assert!(limiter.remembered(&ip(3)).is_some(), "lapsed entries made room");
        assert_eq!(limiter.refused.read().unwrap().by_key.len(), 1);
    }

    #[test]
    fn a_full_memory_is_scanned_once_until_a_refusal_can_have_lapsed() {
        let limiter = Limiter::with_capacity(policy(), 3);
        let ip = |i: u32| format!("p:ratelimit:sliding-log:{{198.51.{}.{}}}", i / 256, i % 256);
        // Long enough that a loaded host's 997 refusals below all come before it ends.
        let short = Decision::from_reply((0, 0, 2_000_000, 2_000_000));
        let long = Decision::from_reply((0, 0, 60_000_000, 60_000_000));
        limiter.remember(&ip(0), Instant::now(), &short);
        limiter.remember(&ip(1), Instant::now(), &long);
        limiter.remember(&ip(2), Instant::now(), &long);
        for i in 3..1000 {
            limiter.remember(&ip(i), Instant::now(), &long);
        }
        assert_eq!(limiter.refused.read().unwrap().scans, 1, "one scan for 997 refusals a full memory could not keep");
        assert_eq!(limiter.remembered(&ip(999)), None);
        // A refusal remembered again (its key is there) is kept, and may end sooner.
        limiter.remember(&ip(1), Instant::now(), &short);
        std::thread::sleep(Duration::from_millis(2_100));
        limiter.remember(&ip(1000), Instant::now(), &long);
        let refused = limiter.refused.read().unwrap();
        assert_eq!(refused.scans, 2, "scanned again once the earliest could have lapsed");
        assert_eq!(refused.by_key.len(), 2, "the two lapsed made room for the new one");
        drop(refused);
        assert!(limiter.remembered(&ip(1000)).is_some() && limiter.remembered(&ip(2)).is_some());
    }

    #[test]
    fn refusals_lapsing_one_by_one_do_not_make_every_new_refusal_scan_a_full_memory() {
        let limiter = Limiter::with_capacity(policy(), 200);
        let ip = |i: u32| format!("p:ratelimit:sliding-log:{{203.0.{}.{}}}", i / 256, i % 256);
        let long = Decision::from_reply((0, 0, 60_000_000, 60_000_000));
        // A full memory whose refusals lapse one a millisecond for 200 ms.
        let start = Instant::now();
        for i in 0..200 {
            let lapsing = Decision::from_reply((0, 0, 1_000 * (i + 1), 1_000 * (i + 1)));
            limiter.remember(&ip(i as u32), start, &lapsing);
        }
        let last = start + Duration::from_millis(200);
        let mut new = 1000;
        while Instant::now() <= last {
            limiter.remember(&ip(new), Instant::now(), &long);
            new += 1;
        }
        let took = start.elapsed();
        let scans = limiter.refused.read().unwrap().scans;
        let allowed = 1 + (took.as_millis() / SCAN_PAUSE.as_millis()) as usize;
        assert!(scans <= allowed, "{scans} scans in {took:?} for {} new refusals", new - 1000);
    }
}
