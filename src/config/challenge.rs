//! Proof of work at the door (`crate::challenge`): the default cost of a sale's challenge, the
//! work of one try, how long a challenge lasts, and the curve that raises the cost for a client
//! address that asks often (docs/waiting-room.md, "Proof of work").

use std::time::Duration;

pub use crate::challenge::MAX_COST;
use crate::challenge::{Curve, Settings};

/// Proof of work (docs/waiting-room.md, "Proof of work").
#[derive(Debug, Clone, clap::Args)]
pub struct ChallengeConfig {
    /// The challenge of a sale whose seed names none: the tries a person's solve takes on average
    /// (each one PBKDF2 of SECKILL_CHALLENGE_ITERATIONS); 0: no challenge. Recorded at the seed.
    #[arg(long, env = "SECKILL_CHALLENGE_COST", default_value_t = 0, global = true,
        value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_COST)))]
    pub challenge_cost: u32,

    /// PBKDF2-SHA-256 iterations of one try (10 to 100000). Issuing a challenge costs the server
    /// one such derivation; checking a solution, one HMAC.
    #[arg(long, env = "SECKILL_CHALLENGE_ITERATIONS", default_value_t = 1000, global = true,
        value_parser = clap::value_parser!(u32).range(10..=100_000))]
    pub challenge_iterations: u32,

    /// How long a challenge can be solved and used (10s to 10m).
    #[arg(long, env = "SECKILL_CHALLENGE_TTL", default_value = "2m", value_parser = challenge_ttl, global = true)]
    pub challenge_ttl: Duration,

    /// Challenges a client address takes per minute at the sale's cost; past them the cost grows.
    #[arg(long, env = "SECKILL_CHALLENGE_FREE", default_value_t = 5, global = true)]
    pub challenge_free: u32,

    /// Every this many challenges past SECKILL_CHALLENGE_FREE in a minute add the sale's cost once
    /// more to the address's next challenge (1 or more).
    #[arg(long, env = "SECKILL_CHALLENGE_STEP", default_value_t = 10, global = true,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub challenge_step: u32,

    /// The most the cost grows to: this many times the sale's cost (1 to 1024).
    #[arg(long, env = "SECKILL_CHALLENGE_MAX_FACTOR", default_value_t = 64, global = true,
        value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub challenge_max_factor: u32,
}

impl Default for ChallengeConfig {
    fn default() -> Self {
        Self {
            challenge_cost: 0,
            challenge_iterations: 1000,
            challenge_ttl: Duration::from_secs(120),
            challenge_free: 5,
            challenge_step: 10,
            challenge_max_factor: 64,
        }
    }
}

impl ChallengeConfig {
    /// The challenges' settings.
    pub fn settings(&self) -> Settings {
        Settings {
            iterations: self.challenge_iterations,
            ttl: self.challenge_ttl,
            curve: Curve { free: self.challenge_free, step: self.challenge_step, max: self.challenge_max_factor },
        }
    }
}

fn challenge_ttl(s: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 2m: {e}"))?;
    if ttl < Duration::from_secs(10) || ttl > Duration::from_secs(600) {
        return Err(format!("a challenge must last between 10s and 10m, got {s:?}"));
    }
    Ok(ttl)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Cli;

    #[test]
    fn the_defaults_hold_and_the_bounds_are_checked() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["seckill", "migrate"], args].concat());
        let config = parse(&[]).unwrap().config().unwrap().challenge;
        let defaults = ChallengeConfig::default();
        assert_eq!(
            (config.challenge_cost, config.challenge_iterations, config.challenge_ttl),
            (defaults.challenge_cost, defaults.challenge_iterations, defaults.challenge_ttl)
        );
        assert_eq!(
            (config.challenge_free, config.challenge_step, config.challenge_max_factor),
            (defaults.challenge_free, defaults.challenge_step, defaults.challenge_max_factor)
        );
        for bad in [
            &["--challenge-ttl", "5s"][..],
            &["--challenge-ttl", "1h"],
            &["--challenge-iterations", "1"],
            &["--challenge-step", "0"],
            &["--challenge-max-factor", "2000"],
            &["--challenge-cost", "1000001"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
