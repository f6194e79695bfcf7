//! Reference models of the five limiters, written the textbook way (exact integers and
//! fractions, no shared code with the scripts), and the decision every script must give.
//!
//! A model only knows two things: how many requests it would admit back to back at a time
//! (`room`) and how to record an admitted one. `decide` derives the rest by search: the retry
//! time is the first microsecond with room, the reset time the first with the whole capacity.

use std::collections::{BTreeMap, VecDeque};

use seckill::limiter::{Algorithm, Policy};

/// A script's reply `{allowed, remaining, retry_after_us, reset_us}`.
pub type Reply = (i64, i64, i64, i64);

#[derive(Debug, Clone)]
pub struct Model {
    limit: u128,
    window: u128,
    burst: u128,
    state: State,
}

#[derive(Debug, Clone)]
enum State {
    /// Times of admitted requests.
    SlidingLog(VecDeque<u128>),
    /// Admitted requests per window index.
    SlidingCounter(BTreeMap<u128, u128>),
    /// The current window's index and count.
    FixedWindow(Option<(u128, u128)>),
    /// Tokens as a fraction over `window` (tokens * window), and when they were counted.
    TokenBucket { scaled_tokens: u128, at: u128 },
    /// The theoretical arrival time in 1/limit microseconds, once there is one.
    Gcra(Option<u128>),
}

impl Model {
    pub fn new(policy: &Policy) -> Self {
        let window = policy.window.as_micros();
        let (limit, burst) = (u128::from(policy.limit), u128::from(policy.burst));
        let state = match policy.algorithm {
            Algorithm::SlidingLog => State::SlidingLog(VecDeque::new()),
            Algorithm::SlidingCounter => State::SlidingCounter(BTreeMap::new()),
            Algorithm::FixedWindow => State::FixedWindow(None),
            Algorithm::TokenBucket => State::TokenBucket { scaled_tokens: burst * window, at: 0 },
            Algorithm::Gcra => State::Gcra(None),
        };
        Self { limit, window, burst, state }
    }

    /// Requests admitted when the whole quota is there.
    fn capacity(&self) -> u128 {
        match self.state {
            State::TokenBucket { .. } | State::Gcra(_) => self.burst,
            _ => self.limit,
        }
    }

    /// How many requests would be admitted back to back at `now`.
    fn room(&self, now: u128) -> u128 {
        let (limit, window) = (self.limit, self.window);
        match &self.state {
            State::SlidingLog(log) => {
                let in_window = log.iter().filter(|&&t| t + window > now).count() as u128;
                limit.saturating_sub(in_window)
            }
            State::FixedWindow(current) => match current {
                Some((index, count)) if *index == now / window => limit - count,
                _ => limit,
            },
            State::SlidingCounter(counts) => {
                // estimate = previous * (window - elapsed) / window + current; room while
                // estimate + k <= limit, compared multiplied by window.
                let index = now / window;
                let elapsed = now - index * window;
                let previous = index.checked_sub(1).and_then(|i| counts.get(&i)).copied().unwrap_or(0);
                let current = counts.get(&index).copied().unwrap_or(0);
                let used = previous * (window - elapsed) + current * window;
                (limit * window).saturating_sub(used) / window
            }
            State::TokenBucket { scaled_tokens, at } => {
                let refill = now.saturating_sub(*at) * limit; // limit tokens per window
                (scaled_tokens + refill).min(self.burst * window) / window
            }
            State::Gcra(tat) => {
                // Units of 1/limit us: emission interval T = window, tolerance (burst - 1) * T.
                let now = now * limit;
                let ahead = tat.map_or(0, |tat| tat.saturating_sub(now));
                let tolerance = (self.burst - 1) * window;
                if ahead > tolerance { 0 } else { (tolerance - ahead) / window + 1 }
            }
        }
    }

    /// Records a request admitted at `now` (the caller checked `room`).
    fn record(&mut self, now: u128) {
        let (limit, window, burst) = (self.limit, self.window, self.burst);
        match &mut self.state {
            State::SlidingLog(log) => log.push_back(now),
            State::FixedWindow(current) => {
                let index = now / window;
                let count = match current {
                    Some((i, c)) if *i == index => *c,
                    _ => 0,
                };
                *current = Some((index, count + 1));
            }
            State::SlidingCounter(counts) => *counts.entry(now / window).or_default() += 1,
            State::TokenBucket { scaled_tokens, at } => {
                let refill = now.saturating_sub(*at) * limit;
                *scaled_tokens = (*scaled_tokens + refill).min(burst * window) - window;
                *at = now;
            }
            State::Gcra(tat) => {
                let scaled_now = now * limit;
                *tat = Some(tat.map_or(scaled_now, |t| t.max(scaled_now)) + window);
            }
        }
    }

    /// The decision for a request at `now`, recording it when admitted.
    pub fn decide(&mut self, now: u64) -> Reply {
        let now = u128::from(now);
        if self.room(now) >= 1 {
            self.record(now);
            let remaining = self.room(now);
            let reset = self.first_after(now, 0, |m, t| m.room(t) == m.capacity());
            (1, remaining as i64, 0, reset as i64)
        } else {
            let retry = self.first_after(now, 1, |m, t| m.room(t) >= 1);
            let reset = self.first_after(now, 0, |m, t| m.room(t) == m.capacity());
            (0, 0, retry as i64, reset as i64)
        }
    }

    /// The smallest wait >= `from` after `now` at which `holds` (monotone in time) is true.
    fn first_after(&self, now: u128, from: u128, holds: impl Fn(&Self, u128) -> bool) -> u128 {
        let (mut low, mut high) = (from, (self.capacity() + 2) * self.window);
        assert!(holds(self, now + high), "the model never recovers: {self:?}");
        while low < high {
            let mid = (low + high) / 2;
            if holds(self, now + mid) { high = mid } else { low = mid + 1 }
        }
        low
    }
}
