//! When sales retire by themselves: `SECKILL_RETIRE_AFTER` and `SECKILL_RETIRE_INTERVAL`
//! (`crate::retire::janitor`).

use std::time::Duration;

use super::duration;

/// The janitor that retires sales automatically (docs/operations.md: "Retiring sales").
#[derive(Debug, Clone, clap::Args)]
pub struct RetireConfig {
    /// Retire a sale automatically this long after it ended or sold out (its last order), once
    /// its queue has drained and it reconciles: its Redis keys go, Postgres keeps its orders and
    /// its row (marked retired). 0: never.
    #[arg(long, env = "SECKILL_RETIRE_AFTER", default_value = "24h", value_parser = duration, global = true)]
    pub retire_after: Duration,

    /// How often the janitor looks for sales to retire (one instance at a time, by a Redis lock
    /// held this long).
    #[arg(long, env = "SECKILL_RETIRE_INTERVAL", default_value = "1m", value_parser = positive_duration,
          global = true)]
    pub retire_interval: Duration,
}

impl Default for RetireConfig {
    /// 24 h after the end, looked for every minute.
    fn default() -> Self {
        Self { retire_after: Duration::from_secs(24 * 3600), retire_interval: Duration::from_secs(60) }
    }
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.as_millis() == 0 { Err("must be at least 1ms".into()) } else { Ok(d) }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::config::Cli;

    #[test]
    fn retirement_defaults_to_a_day_and_zero_means_never() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["seckill", "migrate"], args].concat());
        let default = parse(&[]).unwrap().config().unwrap().retire;
        assert_eq!((default.retire_after.as_secs(), default.retire_interval.as_secs()), (86_400, 60));
        let never = parse(&["--retire-after", "0"]).unwrap().config().unwrap().retire;
        assert!(never.retire_after.is_zero());
        assert!(parse(&["--retire-interval", "0"]).is_err());
    }
}
