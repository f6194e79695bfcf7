//! One typed configuration for every command, from flags with `SECKILL_*` environment fallbacks.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;
use secrecy::{ExposeSecret, SecretString};

use crate::limiter::{Algorithm, DEFAULT_IPV6_PREFIX, Policy, RateLimit, Scope};
use crate::telemetry::LogFormat;

use self::parse::{admin_token, duration, flag_ttl, key_prefix, secret, trusted_proxy};

mod admission;
mod auth;
mod challenge;
mod command;
mod database;
mod durability;
mod edge;
mod operators;
mod parse;
mod payments;
mod retire;
mod webhooks;

pub use admission::AdmissionConfig;
pub use auth::AuthConfig;
pub use challenge::{ChallengeConfig, MAX_COST as MAX_CHALLENGE_COST};
pub use command::{Command, DrawCommand, SolveArgs};
pub use database::DatabaseConfig;
pub use durability::{DurabilityConfig, MAX_CONFIRM_REPLICAS};
pub use edge::EdgeConfig;
pub use operators::OperatorsConfig;
pub use parse::{MIN_ADMIN_TOKEN_BYTES, rate_limit};
pub use payments::PaymentConfig;
pub use retire::RetireConfig;
pub use webhooks::{Schedule, WebhookConfig};

/// The `seckill` command line.
#[derive(Debug, Parser)]
#[command(
    name = "seckill",
    version,
    about = "Flash-sale purchase service",
    long_about = None,
    after_help = "Traces: set OTEL_EXPORTER_OTLP_ENDPOINT (and the standard OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, \
        OTEL_TRACES_SAMPLER_ARG) to export OpenTelemetry traces over OTLP/HTTP; see docs/operations.md, \"Traces\"."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The settings of a command that has them ([`Command::config`]), taken out of the command
    /// line.
    pub fn config(self) -> Option<Config> {
        self.command.config().cloned()
    }
}

/// Every setting of the service. Each has a default so `seckill serve` runs against local servers.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Address the HTTP server binds (port 0 picks a free port).
    #[arg(long, env = "SECKILL_LISTEN", default_value = "127.0.0.1:8080", global = true)]
    pub listen: SocketAddr,

    /// Redis URL (redis://[user:password@]host:port[/db]); a Redis Cluster as its seed nodes,
    /// comma-separated (redis://a:6379,redis://b:6379), or one redis+cluster://host:port URL.
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6379",
          value_parser = secret, hide_env_values = true, global = true)]
    pub redis_url: SecretString,

    /// Postgres URL (postgres://user[:password]@host:port/database).
    #[arg(long, env = "SECKILL_DATABASE_URL", default_value = "postgres://seckill@127.0.0.1:5432/seckill",
          value_parser = secret, hide_env_values = true, global = true)]
    pub database_url: SecretString,

    /// Bearer token for the /admin routes and the live page at /admin, at least 32 bytes (the
    /// service refuses to start with a shorter one): an unnamed operator, `admin-token` in the
    /// audit. Unset, and no named operator (SECKILL_OPERATORS_FILE): they answer 403.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", value_parser = secret, hide_env_values = true, global = true)]
    pub admin_token: Option<SecretString>,

    /// Per-client-IP limit on POST /buy, as REQUESTS/WINDOW (e.g. 20/1s, 100/500ms): REQUESTS
    /// up to 1000000, WINDOW whole milliseconds up to 1h, REQUESTS x WINDOW at most 2^50 µs
    /// (1000000/1s, 300000/1h).
    #[arg(long, env = "SECKILL_RATE_LIMIT", default_value = "20/1s", value_parser = rate_limit, global = true)]
    pub rate_limit: RateLimit,

    /// Per-buyer limit on POST /buy, in addition to the per-client-IP one, as REQUESTS/WINDOW
    /// (bounded as SECKILL_RATE_LIMIT, same algorithm; burst = REQUESTS). Default: off (while
    /// the buyer is the request body's user id, anyone could spend a named buyer's quota).
    #[arg(long, env = "SECKILL_USER_RATE_LIMIT", value_parser = rate_limit, global = true)]
    pub user_rate_limit: Option<RateLimit>,

    /// IPv6 clients are limited by their network of this many leading bits (1-128): every
    /// address of one /64 shares one quota. IPv4 clients are limited per address.
    #[arg(long, env = "SECKILL_IPV6_PREFIX", default_value_t = DEFAULT_IPV6_PREFIX,
          value_parser = clap::value_parser!(u8).range(1..=128), global = true)]
    pub ipv6_prefix: u8,

    /// In-process per-client limit on the answers to a sale known sold out (409/410 from
    /// memory), as REQUESTS/WINDOW. Default: the same as SECKILL_RATE_LIMIT.
    #[arg(long, env = "SECKILL_SOLD_OUT_RATE_LIMIT", value_parser = rate_limit, global = true)]
    pub sold_out_rate_limit: Option<RateLimit>,

    /// How long this instance answers a sold-out sale from memory before asking Redis again
    /// (100ms-1h). A reopened sale (a top-up, a re-seed, a unit given back) clears the flag on
    /// every instance at once through the events channel; this bounds how long an instance that
    /// missed the event keeps refusing, and how stale a repeat buyer's 409 status may be.
    #[arg(long, env = "SECKILL_SOLD_OUT_FLAG_TTL", default_value = "5s", value_parser = flag_ttl, global = true)]
    pub sold_out_flag_ttl: Duration,

    /// How the rate limit is enforced (docs/rate-limiting.md compares them). Default
    /// sliding-log: a true sliding window, never more than REQUESTS in any WINDOW.
    #[arg(long, env = "SECKILL_RATE_LIMIT_ALGORITHM", value_enum, default_value_t = Algorithm::SlidingLog,
          global = true)]
    pub rate_limit_algorithm: Algorithm,

    /// Requests admitted back to back, for token-bucket and gcra only (bounded as REQUESTS). Default: the
    /// rate limit's REQUESTS.
    #[arg(long, env = "SECKILL_RATE_LIMIT_BURST", global = true)]
    pub rate_limit_burst: Option<u32>,

    /// Where the rate limits count: `sale` (one count per client, and per buyer, per sale; per
    /// shard of a sharded sale, the buyer's home shard) or `global` (one count across every
    /// sale). `sale` keeps the limits in the purchase's own Redis call everywhere (their keys share
    /// the shard's slot); on a Redis Cluster `global` adds a call per limit.
    #[arg(long, env = "SECKILL_RATE_LIMIT_SCOPE", value_enum, default_value_t = Scope::Sale, global = true)]
    pub rate_limit_scope: Scope,

    /// Log lines as text or as one JSON object per line (with the request id of its request).
    #[arg(long, env = "SECKILL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Comma-separated proxies (IPs or CIDRs) whose X-Forwarded-For is believed. Default: none.
    #[arg(long, env = "SECKILL_TRUSTED_PROXIES", value_delimiter = ',', value_parser = trusted_proxy,
          global = true)]
    pub trusted_proxies: Vec<IpNet>,

    /// Prefix of every Redis key (one namespace per deployment); no braces.
    #[arg(long, env = "SECKILL_KEY_PREFIX", default_value = "seckill", value_parser = key_prefix,
          global = true)]
    pub key_prefix: String,

    /// How long a Redis command may take before the request answers 503 (a purchase: 503
    /// outcome_unknown with its order id, as Redis may still run it); above 0.
    #[arg(long, env = "SECKILL_REDIS_TIMEOUT", default_value = "1s", value_parser = duration, global = true)]
    pub redis_timeout: Duration,

    /// Size of the request pool of Postgres connections (the worker and the webhook dispatcher open
    /// their own few besides).
    #[arg(long, env = "SECKILL_DATABASE_MAX_CONNECTIONS", default_value_t = 10, global = true)]
    pub database_max_connections: u32,

    /// Orders the worker reads and inserts per batch.
    #[arg(long, env = "SECKILL_WORKER_BATCH", default_value_t = 2000,
          value_parser = clap::value_parser!(u32).range(1..=10_000), global = true)]
    pub worker_batch: u32,

    /// How long one worker read waits for new orders (also bounds its shutdown latency).
    #[arg(long, env = "SECKILL_WORKER_BLOCK", default_value = "1s", value_parser = duration, global = true)]
    pub worker_block: Duration,

    /// Orders pending this long with a (presumed dead) consumer are claimed by this worker.
    #[arg(long, env = "SECKILL_WORKER_CLAIM_TIMEOUT", default_value = "30s", value_parser = duration,
          global = true)]
    pub worker_claim_timeout: Duration,

    /// This worker's consumer name in the group. Default: <hostname>-<port> for `serve`,
    /// <hostname>-worker for `seckill worker` (names that survive a restart; run one standalone
    /// worker per host, or name each).
    #[arg(long, env = "SECKILL_WORKER_CONSUMER", global = true)]
    pub worker_consumer: Option<String>,

    /// How long shutdown waits for in-flight requests before closing them.
    #[arg(long, env = "SECKILL_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = duration,
          global = true)]
    pub shutdown_timeout: Duration,

    /// Most purchases of one sale (one shard) in one Redis call: while a call is on Redis, the
    /// purchases arriving for the same shard on the same HTTP worker (with more workers than
    /// CPUs: the same group of workers, a group per CPU) wait and go together in the next (no
    /// timer: a purchase that finds none in flight goes at once). 1: each purchase in a call of
    /// its own. Ignored with SECKILL_CONFIRM_REPLICAS (each purchase waits alone).
    #[arg(long, env = "SECKILL_PURCHASE_BATCH", default_value_t = crate::purchase::batch::DEFAULT_PURCHASE_BATCH,
          value_parser = clap::value_parser!(u32).range(1..=256), global = true)]
    pub purchase_batch: u32,

    /// HTTP worker threads of `serve`. Unset: the CPUs this process may use (its affinity and
    /// cgroup CPU quota included).
    #[arg(long, env = "SECKILL_HTTP_WORKERS", value_parser = clap::value_parser!(u16).range(1..=1024), global = true)]
    pub http_workers: Option<u16>,

    /// Who the buyer of POST /buy is.
    #[command(flatten)]
    pub auth: AuthConfig,

    /// Who operates: the named operators and their roles.
    #[command(flatten)]
    pub operators: OperatorsConfig,

    /// Postgres statement timeout, keepalives and the worker's insert deadline.
    #[command(flatten)]
    pub database: DatabaseConfig,

    /// Whether a 201 waits for Redis replicas.
    #[command(flatten)]
    pub durability: DurabilityConfig,

    /// When sales retire by themselves.
    #[command(flatten)]
    pub retire: RetireConfig,

    /// What a connection may hold before a request reaches a handler; the metrics listener.
    #[command(flatten)]
    pub edge: EdgeConfig,

    /// Reservations: the default payment window and the payment events' secret.
    #[command(flatten)]
    pub payments: PaymentConfig,

    /// Waiting rooms: how long an admission lasts, the key of their tokens.
    #[command(flatten)]
    pub admission: AdmissionConfig,

    /// Proof of work: a sale's default challenge, the work of a try, the curve for busy addresses.
    #[command(flatten)]
    pub challenge: ChallengeConfig,

    /// Webhooks: the endpoints of the order events, their secret, timeout, schedule, retention.
    #[command(flatten)]
    pub webhooks: WebhookConfig,
}

impl Config {
    /// The rate limit, algorithm and burst, checked together.
    pub fn rate_limit_policy(&self) -> Result<Policy, String> {
        Policy::new(self.rate_limit_algorithm, self.rate_limit, self.rate_limit_burst)
    }

    /// The per-buyer limit's policy, if one is set: the same algorithm, its burst its REQUESTS.
    pub fn user_rate_limit_policy(&self) -> Result<Option<Policy>, String> {
        let Some(rate) = self.user_rate_limit else { return Ok(None) };
        let policy = Policy::new(self.rate_limit_algorithm, rate, None).map_err(|e| format!("per-buyer limit: {e}"))?;
        Ok(Some(policy.for_buyers()))
    }

    /// The limit on answers from memory to a sale known sold out.
    pub fn sold_out_rate_limit(&self) -> RateLimit {
        self.sold_out_rate_limit.unwrap_or(self.rate_limit)
    }

    /// The settings clap cannot check for a configuration built in code (the tests'): the admin
    /// token's length, the insert deadline against the statement timeout, the replicas' wait
    /// against the Redis timeout.
    pub fn validate(&self) -> Result<(), String> {
        self.database.validate()?;
        if self.database_max_connections == 0 {
            return Err("SECKILL_DATABASE_MAX_CONNECTIONS must be at least 1".into());
        }
        if self.redis_timeout.is_zero() {
            return Err("SECKILL_REDIS_TIMEOUT must be above 0: a 0 fails every Redis call".into());
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(60)).contains(&self.worker_block) {
            return Err(format!(
                "SECKILL_WORKER_BLOCK must be 1ms-60s (Redis reads a block of 0 as for ever), got {:?}",
                self.worker_block
            ));
        }
        if self.worker_claim_timeout <= self.worker_block {
            return Err(format!(
                "SECKILL_WORKER_CLAIM_TIMEOUT ({:?}) must exceed SECKILL_WORKER_BLOCK ({:?}): a shorter one claims \
                 the batches live workers have just read",
                self.worker_claim_timeout, self.worker_block
            ));
        }
        Policy::new(self.rate_limit_algorithm, self.sold_out_rate_limit(), None)
            .map_err(|e| format!("SECKILL_SOLD_OUT_RATE_LIMIT: {e}"))?;
        self.auth.validate()?;
        self.payments.validate()?;
        self.admission.validate()?;
        self.webhooks.validate()?;
        if let Some(token) = &self.admin_token {
            admin_token(token.expose_secret())?;
        }
        self.operators.roster(self.admin_token.as_ref())?;
        self.durability.validate(self.redis_timeout)
    }

    /// The consumer name this process uses in the worker's consumer group: SECKILL_WORKER_CONSUMER,
    /// else `<hostname>-<role>` (`role`: the HTTP port for `serve`, `worker` for `seckill worker`),
    /// a name the next start of the same process takes again, so restarts do not pile up consumers.
    pub fn consumer_name(&self, role: &str) -> String {
        self.worker_consumer.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok())
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "seckill".to_owned());
            format!("{host}-{role}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_algorithm_and_its_burst_come_from_flags_and_are_checked_together() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["seckill", "migrate"], args].concat());
        let cli =
            parse(&["--rate-limit", "10/2s", "--rate-limit-algorithm", "gcra", "--rate-limit-burst", "3"]).unwrap();
        let policy = cli.command.config().unwrap().rate_limit_policy().unwrap();
        assert_eq!(
            (policy.algorithm, policy.limit, policy.window, policy.burst),
            (Algorithm::Gcra, 10, Duration::from_secs(2), 3)
        );
        let default = parse(&[]).unwrap().config().unwrap().rate_limit_policy().unwrap();
        assert_eq!((default.algorithm, default.limit), (Algorithm::SlidingLog, 20), "a sliding window by default");
        assert!(parse(&["--rate-limit-algorithm", "leaky"]).is_err());
        let burst_without_bucket =
            parse(&["--rate-limit-algorithm", "sliding-log", "--rate-limit-burst", "3"]).unwrap();
        assert!(burst_without_bucket.command.config().unwrap().rate_limit_policy().is_err());
    }

    #[test]
    fn settings_clap_takes_but_no_process_could_run_with_are_refused_at_start() {
        let refusal = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["seckill", "worker"], args].concat()).unwrap();
            cli.command.config().unwrap().validate().err()
        };
        assert_eq!(refusal(&[]), None, "the defaults");
        for (args, says) in [
            (&["--worker-block", "0s"][..], "SECKILL_WORKER_BLOCK"),
            (&["--worker-block", "2m"], "SECKILL_WORKER_BLOCK"),
            (&["--worker-block", "2s", "--worker-claim-timeout", "1s"], "SECKILL_WORKER_CLAIM_TIMEOUT"),
            (&["--database-max-connections", "0"], "SECKILL_DATABASE_MAX_CONNECTIONS"),
            (&["--redis-timeout", "0s"], "SECKILL_REDIS_TIMEOUT"),
            (&["--sold-out-rate-limit", "5000000/10h"], "SECKILL_SOLD_OUT_RATE_LIMIT"),
            (&["--jwt-leeway", "30d"], "SECKILL_JWT_LEEWAY"),
            (&["--jwt-leeway", "2m", "--jwt-max-lifetime", "1m"], "SECKILL_JWT_LEEWAY"),
            (&["--worker-insert-timeout", "0s"], "SECKILL_WORKER_INSERT_TIMEOUT"),
        ] {
            let refused = refusal(args).unwrap_or_else(|| panic!("{args:?} was taken"));
            assert!(refused.contains(says), "{args:?}: {refused}");
        }
        // The replicas' wait is checked only when purchases wait for replicas.
        assert_eq!(refusal(&["--redis-timeout", "200ms"]), None);
        let waiting = refusal(&["--redis-timeout", "200ms", "--confirm-replicas", "1"]).unwrap();
        assert!(waiting.contains("SECKILL_CONFIRM_TIMEOUT"), "{waiting}");
    }

    #[test]
    fn an_admin_token_under_32_bytes_is_refused_at_start_without_being_shown() {
        let parse = |token: &str| Cli::try_parse_from(["seckill", "migrate", "--admin-token", token]);
        let short = parse("secret-but-31-bytes-long-abcdef").unwrap().config().unwrap().validate().unwrap_err();
        assert!(short.contains("at least 32 bytes"), "{short}");
        assert!(!short.contains("secret-but"), "the refused token is not printed: {short}");
        let cli = parse(&"x".repeat(32)).unwrap();
        assert!(cli.command.config().unwrap().validate().is_ok());
        let mut config = cli.config().unwrap();
        config.admin_token = Some(SecretString::from("test-admin-token"));
        assert!(config.validate().unwrap_err().contains("at least 32 bytes"), "a config built in code too");
    }

    #[test]
    fn the_per_buyer_limit_is_off_by_default_and_shares_the_algorithm() {
        let parse =
            |args: &[&str]| Cli::try_parse_from([&["seckill", "migrate"], args].concat()).unwrap().config().unwrap();
        let default = parse(&[]);
        assert_eq!(default.user_rate_limit_policy(), Ok(None));
        assert_eq!((default.ipv6_prefix, default.sold_out_rate_limit()), (64, default.rate_limit));
        assert_eq!(default.sold_out_flag_ttl, crate::purchase::sold_out::FLAG_TTL);
        assert!(Cli::try_parse_from(["seckill", "migrate", "--sold-out-flag-ttl", "2h"]).is_err(), "over an hour");
        assert_eq!(parse(&["--sold-out-flag-ttl", "1h"]).sold_out_flag_ttl, Duration::from_secs(3600));
        let set = parse(&["--user-rate-limit", "5/10s", "--rate-limit-algorithm", "gcra", "--rate-limit-burst", "2"]);
        let policy = set.user_rate_limit_policy().unwrap().unwrap();
        assert_eq!((policy.algorithm, policy.limit, policy.burst, policy.name), (Algorithm::Gcra, 5, 5, "buyer"));
        assert!(Cli::try_parse_from(["seckill", "migrate", "--ipv6-prefix", "0"]).is_err());
        assert!(Cli::try_parse_from(["seckill", "migrate", "--ipv6-prefix", "129"]).is_err());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
