//! The refused clients (or buyers) one instance remembers, so that it answers them 429 without
//! asking Redis again until the limiter could admit them.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Instant;

use super::{Decision, Policy};

/// Remembered refusals at most; beyond, lapsed ones are dropped first, and if none has lapsed
/// the refused one is not remembered (Redis still decides).
const MAX_REMEMBERED: usize = 100_000;

/// The limiter one instance runs: its policy and whom it refused recently, by the limiter key
/// the refusal came from ([`super::Gate::key`]), which names the client (or buyer) and, under
/// `SECKILL_RATE_LIMIT_SCOPE=sale`, the sale.
#[derive(Debug)]
pub struct Limiter {
    /// The policy every client is held to.
    pub policy: Policy,
    refused: RwLock<HashMap<String, Refusal>>,
    capacity: usize,
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
        let refusal = *self.refused.read().unwrap_or_else(|e| e.into_inner()).get(client)?;
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
        if refused.len() >= self.capacity && !refused.contains_key(client) {
            refused.retain(|_, r| r.retry_at > now);
            if refused.len() >= self.capacity {
                return;
            }
        }
        refused.insert(client.to_owned(), refusal);
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
        assert_eq!(limiter.refused.read().unwrap().len(), 1);
    }
}
