//! The limiting algorithms. Adding one takes: a script `lua/<name>.lua` keeping the scripts'
//! contract ([`crate::limiter`]), its entry in `crate::redis::lua`, a variant here (listed in
//! [`Algorithm::ALL`], named in [`Algorithm::name`], its script in [`Algorithm::script`]), and its
//! reference model in `tests/api/limiters/models.rs`. The tests run every algorithm in `ALL`.

use std::fmt;

use redis::Script;

use crate::redis::lua;

/// The limiting algorithm (`SECKILL_RATE_LIMIT_ALGORITHM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Algorithm {
    /// Sorted set of admitted requests: exact, one member per request in the window.
    SlidingLog,
    /// This and the previous window's counts, the previous one weighted: O(1), approximate.
    SlidingCounter,
    /// One counter per clock-aligned window: cheapest, admits up to 2x at a window edge.
    FixedWindow,
    /// Bucket of `burst` tokens refilled at limit/window, fractions kept.
    TokenBucket,
    /// Generic cell rate algorithm (as in redis-cell): one theoretical arrival time per client.
    Gcra,
}

impl Algorithm {
    /// Every algorithm (a test checks that none is missing).
    pub const ALL: [Self; 5] =
        [Self::SlidingLog, Self::SlidingCounter, Self::FixedWindow, Self::TokenBucket, Self::Gcra];

    /// The name in configuration and in the client's Redis key.
    pub fn name(self) -> &'static str {
        match self {
            Self::SlidingLog => "sliding-log",
            Self::SlidingCounter => "sliding-counter",
            Self::FixedWindow => "fixed-window",
            Self::TokenBucket => "token-bucket",
            Self::Gcra => "gcra",
        }
    }

    /// Whether `burst` means anything to this algorithm.
    pub fn has_burst(self) -> bool {
        matches!(self, Self::TokenBucket | Self::Gcra)
    }

    /// Its script in `lua/`.
    pub(super) fn script(self) -> &'static Script {
        match self {
            Self::SlidingLog => &lua::SLIDING_LOG,
            Self::SlidingCounter => &lua::SLIDING_COUNTER,
            Self::FixedWindow => &lua::FIXED_WINDOW,
            Self::TokenBucket => &lua::TOKEN_BUCKET,
            Self::Gcra => &lua::GCRA,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    #[test]
    fn all_holds_every_algorithm_under_its_configuration_name() {
        assert_eq!(Algorithm::value_variants(), Algorithm::ALL);
        for algorithm in Algorithm::ALL {
            let configured = algorithm.to_possible_value().expect("every variant is configurable");
            assert_eq!(configured.get_name(), algorithm.name());
        }
    }
}
