//! When a `201` is answered: at once (the purchase is in the master's memory and AOF), or only
//! once `SECKILL_CONFIRM_REPLICAS` replicas have it (`WAIT`, docs/durability.md: "Confirmed-durable
//! 201").

use std::time::Duration;

use super::duration;

/// Most replicas a purchase can wait for.
pub const MAX_CONFIRM_REPLICAS: u32 = 64;

/// The confirmed-durable 201 (`SECKILL_CONFIRM_*`).
#[derive(Debug, Clone, clap::Args)]
pub struct DurabilityConfig {
    /// Replicas (0-64) that must hold a purchase before POST /buy answers 201 (Redis WAIT on the
    /// connection that bought). Fewer within SECKILL_CONFIRM_TIMEOUT: 503 not_durable with the
    /// order id (the purchase stands). 0: answer at once. One Redis server only (not a cluster).
    #[arg(long, env = "SECKILL_CONFIRM_REPLICAS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=MAX_CONFIRM_REPLICAS as i64), global = true)]
    pub confirm_replicas: u32,

    /// How long a purchase waits for its replicas (at least 1ms, below SECKILL_REDIS_TIMEOUT).
    #[arg(long, env = "SECKILL_CONFIRM_TIMEOUT", default_value = "250ms", value_parser = duration, global = true)]
    pub confirm_timeout: Duration,

    /// Dedicated Redis connections (1-1024) for the purchases that wait for replicas: WAIT
    /// blocks its connection, so each one serves one purchase at a time.
    #[arg(long, env = "SECKILL_CONFIRM_CONNECTIONS", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1024), global = true)]
    pub confirm_connections: u32,
}

impl Default for DurabilityConfig {
    /// Off: 201 without waiting for replicas.
    fn default() -> Self {
        Self { confirm_replicas: 0, confirm_timeout: Duration::from_millis(250), confirm_connections: 16 }
    }
}

impl DurabilityConfig {
    /// Whether purchases wait for replicas.
    pub fn enabled(&self) -> bool {
        self.confirm_replicas > 0
    }

    /// The checks clap cannot make alone: the wait is at least a millisecond (`WAIT` takes whole
    /// ms, and 0 would block for ever) and ends before the Redis command timeout, so a purchase
    /// short of replicas answers 503 `not_durable` rather than a timeout.
    pub fn validate(&self, redis_timeout: Duration) -> Result<(), String> {
        if self.confirm_replicas > MAX_CONFIRM_REPLICAS {
            return Err(format!("SECKILL_CONFIRM_REPLICAS must be 0-{MAX_CONFIRM_REPLICAS}"));
        }
        if !(1..=1024).contains(&self.confirm_connections) {
            return Err("SECKILL_CONFIRM_CONNECTIONS must be 1-1024".into());
        }
        if self.enabled() && (self.confirm_timeout < Duration::from_millis(1) || self.confirm_timeout >= redis_timeout)
        {
            return Err(format!(
                "SECKILL_CONFIRM_TIMEOUT ({:?}) must be at least 1ms and below SECKILL_REDIS_TIMEOUT \
                    ({redis_timeout:?})",
                self.confirm_timeout
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::config::Cli;

    fn parse(args: &[&str]) -> Result<crate::config::Config, String> {
        let cli = Cli::try_parse_from([&["seckill", "migrate"], args].concat()).map_err(|e| e.to_string())?;
        let config = cli.config().unwrap();
        config.validate().map(|()| config)
    }

    #[test]
    fn off_by_default_and_bounded() {
        let default = parse(&[]).unwrap().durability;
        assert_eq!((default.confirm_replicas, default.confirm_connections), (0, 16));
        assert!(!default.enabled());
        assert!(parse(&["--confirm-replicas", "64"]).unwrap().durability.enabled());
        assert!(parse(&["--confirm-replicas", "65"]).is_err());
        assert!(parse(&["--confirm-connections", "0"]).is_err());
    }

    #[test]
    fn the_wait_must_end_before_the_redis_timeout() {
        let waiting = |args: &[&str]| parse(&[&["--confirm-replicas", "1"], args].concat());
        assert!(waiting(&["--confirm-timeout", "999ms"]).is_ok());
        let error = waiting(&["--confirm-timeout", "1s"]).unwrap_err();
        assert!(error.contains("below SECKILL_REDIS_TIMEOUT"), "{error}");
        assert!(waiting(&["--confirm-timeout", "2s", "--redis-timeout", "3s"]).is_ok());
        assert!(waiting(&["--confirm-timeout", "0ms"]).is_err());
        // Without replicas to wait for, the wait is not checked.
        assert!(parse(&["--confirm-timeout", "1s"]).is_ok());
    }
}
