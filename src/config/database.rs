//! Postgres timeouts: the statement timeout and TCP keepalives every pooled connection gets, and
//! the worker's deadline on one batch insert, so a half-open connection after a Postgres failover
//! cannot hang the worker or the shutdown.

use std::time::Duration;

use super::duration;

/// The Postgres timeouts (docs/configuration.md).
#[derive(Debug, Clone, clap::Args)]
pub struct DatabaseConfig {
    /// Postgres cancels a statement running longer than this (`statement_timeout` of every
    /// pooled connection; migrations run without it). `0s`: no limit.
    #[arg(long = "database-statement-timeout", env = "SECKILL_DATABASE_STATEMENT_TIMEOUT", default_value = "10s",
          value_parser = duration, global = true)]
    pub statement_timeout: Duration,

    /// Idle time after which Postgres probes a connection with TCP keepalives (server side:
    /// `tcp_keepalives_idle`, at least 1s, then 3 probes a third of it apart); Postgres then drops a
    /// connection whose client vanished. sqlx 0.8 cannot set client-side keepalives (sqlx
    /// #3540): the client side is bounded by SECKILL_WORKER_INSERT_TIMEOUT. `0s`: the server's default.
    #[arg(long = "database-keepalive", env = "SECKILL_DATABASE_KEEPALIVE", default_value = "30s",
          value_parser = duration, global = true)]
    pub keepalive: Duration,

    /// Longest the worker waits for one batch insert before giving it up (its orders stay
    /// pending and are retried); must exceed SECKILL_DATABASE_STATEMENT_TIMEOUT.
    #[arg(long = "worker-insert-timeout", env = "SECKILL_WORKER_INSERT_TIMEOUT", default_value = "15s",
          value_parser = duration, global = true)]
    pub worker_insert_timeout: Duration,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            statement_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(30),
            worker_insert_timeout: Duration::from_secs(15),
        }
    }
}

/// Keepalive probes Postgres sends before it drops a connection.
const KEEPALIVE_PROBES: u32 = 3;

impl DatabaseConfig {
    /// The insert deadline must leave the statement timeout room to fire first (Postgres then
    /// cancels the statement and the worker sees why).
    pub fn validate(&self) -> Result<(), String> {
        let bounded = !self.statement_timeout.is_zero();
        if self.worker_insert_timeout.is_zero() || (bounded && self.worker_insert_timeout <= self.statement_timeout) {
            return Err(format!(
                "SECKILL_WORKER_INSERT_TIMEOUT ({:?}) must be above 0 and above SECKILL_DATABASE_STATEMENT_TIMEOUT \
                    ({:?})",
                self.worker_insert_timeout, self.statement_timeout
            ));
        }
        Ok(())
    }

    /// The run-time parameters every pooled connection starts with (`options` of the startup
    /// packet): `statement_timeout` in ms, `tcp_keepalives_*` in seconds.
    pub fn session_parameters(&self) -> Vec<(&'static str, String)> {
        let mut params = vec![("statement_timeout", self.statement_timeout.as_millis().to_string())];
        if !self.keepalive.is_zero() {
            let idle = self.keepalive.as_secs().max(1);
            let interval = (idle / u64::from(KEEPALIVE_PROBES)).max(1);
            params.push(("tcp_keepalives_idle", idle.to_string()));
            params.push(("tcp_keepalives_interval", interval.to_string()));
            params.push(("tcp_keepalives_count", KEEPALIVE_PROBES.to_string()));
        }
        params
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_insert_deadline_must_exceed_the_statement_timeout() {
        let mut config = DatabaseConfig::default();
        assert!(config.validate().is_ok());
        config.worker_insert_timeout = config.statement_timeout;
        assert!(config.validate().unwrap_err().contains("SECKILL_WORKER_INSERT_TIMEOUT"));
        config.statement_timeout = Duration::ZERO;
        assert!(config.validate().is_ok(), "no statement timeout: any positive deadline");
    }

    #[test]
    fn session_parameters_carry_the_timeout_and_keepalives() {
        let params = DatabaseConfig::default().session_parameters();
        let get = |name| params.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("statement_timeout"), Some("10000"));
        assert_eq!((get("tcp_keepalives_idle"), get("tcp_keepalives_interval")), (Some("30"), Some("10")));
        assert_eq!(get("tcp_keepalives_count"), Some("3"));
    }
}
