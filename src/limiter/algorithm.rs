//! The limiting algorithms. Adding one takes: a script `lua/<name>.lua` keeping the scripts'
//! contract ([`crate::limiter`]), its source in `crate::redis::lua::limiters`, a variant here
//! (listed in [`Algorithm::ALL`], named in [`Algorithm::name`], its source in
//! [`Algorithm::source`]), and its reference model in `tests/api/limiters/models.rs`. The tests
//! run every algorithm in `ALL`, alone and joined with the purchase (`lua/buy_limited.lua`).

use std::fmt;
use std::sync::LazyLock;

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

    /// The source of its script in `lua/`.
    fn source(self) -> &'static str {
        match self {
            Self::SlidingLog => lua::limiters::SLIDING_LOG,
            Self::SlidingCounter => lua::limiters::SLIDING_COUNTER,
            Self::FixedWindow => lua::limiters::FIXED_WINDOW,
            Self::TokenBucket => lua::limiters::TOKEN_BUCKET,
            Self::Gcra => lua::limiters::GCRA,
        }
    }

    /// Its script in `lua/`.
    pub(super) fn script(self) -> &'static Script {
        &SCRIPTS[self as usize].alone
    }

    /// `lua/buy_limited.lua` with this algorithm: its limits and the purchase in one call.
    pub fn with_purchase(self) -> &'static Script {
        &SCRIPTS[self as usize].with_purchase
    }

    /// `lua/buy_batch.lua` with this algorithm: several purchases, each with its limits, in one call.
    pub fn with_purchases(self) -> &'static Script {
        &SCRIPTS[self as usize].with_purchases
    }
}

/// Each algorithm's scripts, in the order of [`Algorithm::ALL`], built on first use.
struct Scripts {
    alone: Script,
    with_purchase: Script,
    with_purchases: Script,
}

static SCRIPTS: LazyLock<[Scripts; 5]> = LazyLock::new(|| {
    Algorithm::ALL.map(|a| Scripts {
        alone: lua::limiter(a.source()),
        with_purchase: lua::buy_limited(a.source()),
        with_purchases: lua::buy_batch(a.source()),
    })
});

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
        assert!(Algorithm::ALL.iter().enumerate().all(|(i, a)| *a as usize == i), "ALL indexes SCRIPTS");
        for algorithm in Algorithm::ALL {
            let configured = algorithm.to_possible_value().expect("every variant is configurable");
            assert_eq!(configured.get_name(), algorithm.name());
        }
    }
}
