//! Clients the limiter recently refused, remembered until the limiter would admit them again.
//!
//! The sliding-window limiter answers a refusal with the time until the oldest request leaves the
//! window; no request from that client can be admitted before then (refusals are not recorded,
//! and admissions by other instances only push it later). So until then this instance answers
//! 429 itself, without a Redis call: an abusive client costs a hash lookup, not a script.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// Beyond this many remembered clients, lapsed entries are dropped before adding one more (and
/// if none has lapsed, the client is not remembered: the limiter in Redis still decides).
const MAX_CLIENTS: usize = 100_000;

/// Refused clients, each until the limiter would next admit it.
#[derive(Debug)]
pub struct RecentRefusals {
    until: RwLock<HashMap<IpAddr, Instant>>,
    capacity: usize,
}

impl Default for RecentRefusals {
    fn default() -> Self {
        Self::with_capacity(MAX_CLIENTS)
    }
}

impl RecentRefusals {
    /// Remembers at most `capacity` clients.
    pub fn with_capacity(capacity: usize) -> Self {
        Self { until: RwLock::default(), capacity }
    }

    /// How long `client` must still wait, if it was refused and that time has not passed.
    pub fn wait(&self, client: IpAddr) -> Option<Duration> {
        let until = *self.until.read().unwrap_or_else(|e| e.into_inner()).get(&client)?;
        until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
    }

    /// The limiter refused `client` for `retry_after`.
    pub fn refuse(&self, client: IpAddr, retry_after: Duration) {
        let now = Instant::now();
        let mut until = self.until.write().unwrap_or_else(|e| e.into_inner());
        if until.len() >= self.capacity && !until.contains_key(&client) {
            until.retain(|_, t| *t > now);
            if until.len() >= self.capacity {
                return;
            }
        }
        until.insert(client, now + retry_after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_client_waits_until_its_time_and_no_longer() {
        let refusals = RecentRefusals::default();
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        assert_eq!(refusals.wait(a), None);
        refusals.refuse(a, Duration::from_millis(30));
        assert!(refusals.wait(a).is_some_and(|d| d <= Duration::from_millis(30)));
        assert_eq!(refusals.wait(b), None);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(refusals.wait(a), None);
    }

    #[test]
    fn memory_is_bounded_and_lapsed_clients_make_room() {
        let refusals = RecentRefusals::with_capacity(3);
        let ip = |i: u8| IpAddr::from([192, 0, 2, i]);
        for i in 0..3 {
            refusals.refuse(ip(i), Duration::from_millis(20));
        }
        refusals.refuse(ip(3), Duration::from_secs(60));
        assert_eq!(refusals.wait(ip(3)), None, "full: not remembered");
        std::thread::sleep(Duration::from_millis(30));
        refusals.refuse(ip(3), Duration::from_secs(60));
        assert!(refusals.wait(ip(3)).is_some(), "lapsed entries made room");
        assert_eq!(refusals.until.read().unwrap().len(), 1);
    }
}
