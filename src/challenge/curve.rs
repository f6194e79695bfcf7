//! How the work asked of one client address grows with the challenges it took in the last
//! minute: a person asks once or twice and pays the sale's cost; a farm behind one address pays
//! more for each place, up to a bound.

/// `factor(n) = 1` for the first `free` challenges of a minute, then one more for every `step`
/// challenges past them, at most `max` (docs/waiting-room.md has the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Curve {
    pub free: u32,
    pub step: u32,
    pub max: u32,
}

impl Curve {
    /// How many times the sale's cost the `n`-th challenge of a minute asks.
    pub fn factor(&self, n: u64) -> u32 {
        let past = n.saturating_sub(u64::from(self.free));
        let factor = 1 + past.div_ceil(u64::from(self.step.max(1)));
        u32::try_from(factor.min(u64::from(self.max.max(1)))).unwrap_or(self.max)
    }

    /// The work of `n` challenges taken one after another within a minute, in units of one
    /// person's (the sale's cost).
    pub fn total(&self, n: u64) -> u64 {
        (1..=n).map(|i| u64::from(self.factor(i))).sum()
    }
}
