//! Order events out (docs/webhooks.md): `SECKILL_WEBHOOK_URL`, endpoints registered at start (the
//! endpoints are data in Postgres, `crate::webhooks::endpoints`); the signing secret and an older
//! one during a rotation, which make an instance dispatch; each attempt's timeout, the retry
//! schedule, how long an endpoint may fail before it is disabled and how long settled events are
//! kept.

use std::time::Duration;

use secrecy::SecretString;

use super::{duration, secret};
use crate::webhooks::endpoints::{self, MAX_ENDPOINTS};
use crate::webhooks::{self, SCHEDULE, Signer};

/// Webhooks: signed order events posted to the shop's endpoints.
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookConfig {
    /// Comma-separated http(s) endpoints registered at start (once; a disabled one stays
    /// disabled), beside those registered with POST /admin/webhooks. Every instance writes every
    /// order event to every registered endpoint, whatever its own settings; none registered: no
    /// event is written (the outbox costs nothing).
    #[arg(long, env = "SECKILL_WEBHOOK_URL", value_delimiter = ',', value_parser = endpoint, global = true)]
    pub webhook_url: Vec<String>,

    /// The signing secret, whsec_ and 24 to 64 bytes in base64 (e.g. whsec_$(openssl rand -base64
    /// 32)): with it, this instance sends the events to every registered endpoint (every
    /// instance that has it must have the same); required with SECKILL_WEBHOOK_URL.
    #[arg(long, env = "SECKILL_WEBHOOK_SECRET", value_parser = secret, hide_env_values = true, global = true)]
    pub webhook_secret: Option<SecretString>,

    /// During a rotation, the older secret: each event carries both signatures (space-separated)
    /// until receivers have the new one.
    #[arg(long, env = "SECKILL_WEBHOOK_SECRET_PREVIOUS", value_parser = secret, hide_env_values = true,
          global = true)]
    pub webhook_secret_previous: Option<SecretString>,

    /// Longest one delivery attempt may take before it counts as failed.
    #[arg(long, env = "SECKILL_WEBHOOK_TIMEOUT", default_value = "5s", value_parser = duration, global = true)]
    pub webhook_timeout: Duration,

    /// How long an endpoint may fail every attempt before it is disabled: its open deliveries fail
    /// and it gets no new ones until POST /admin/webhooks/{id}/enable (0s: never).
    #[arg(long, env = "SECKILL_WEBHOOK_DISABLE_AFTER", default_value = "3d", value_parser = duration, global = true)]
    pub webhook_disable_after: Duration,

    /// How long delivered (or failed) events are kept, listable and retryable, before the
    /// dispatcher deletes them.
    #[arg(long, env = "SECKILL_WEBHOOK_RETENTION", default_value = "7d", value_parser = duration, global = true)]
    pub webhook_retention: Duration,

    /// The pause before each attempt, comma-separated: one attempt per entry, the first at once
    /// (the Standard Webhooks schedule).
    #[arg(long, env = "SECKILL_WEBHOOK_SCHEDULE", default_value = SCHEDULE, value_parser = schedule, global = true)]
    pub webhook_schedule: Schedule,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            webhook_url: vec![],
            webhook_secret: None,
            webhook_secret_previous: None,
            webhook_timeout: Duration::from_secs(5),
            webhook_disable_after: Duration::from_secs(3 * 24 * 3600),
            webhook_retention: Duration::from_secs(7 * 24 * 3600),
            webhook_schedule: schedule(SCHEDULE).expect("valid default schedule"),
        }
    }
}

/// The retry schedule: the pause before each attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule(pub Vec<Duration>);

impl WebhookConfig {
    /// The dispatcher's settings, `None` without a signing secret (this instance writes events
    /// and sends none); a URL without a secret, or a secret that is malformed, is refused (the
    /// error never shows it).
    pub fn settings(&self) -> Result<Option<webhooks::Settings>, String> {
        if self.webhook_url.len() > MAX_ENDPOINTS as usize {
            return Err(format!("SECKILL_WEBHOOK_URL names more than {MAX_ENDPOINTS} endpoints"));
        }
        let Some(secret) = self.webhook_secret.as_ref() else {
            return match self.webhook_url.is_empty() {
                true => Ok(None),
                false => Err("SECKILL_WEBHOOK_URL needs SECKILL_WEBHOOK_SECRET".into()),
            };
        };
        let signer = Signer::new(secret, self.webhook_secret_previous.as_ref())?;
        if self.webhook_timeout.is_zero() {
            return Err("SECKILL_WEBHOOK_TIMEOUT must be more than 0".into());
        }
        Ok(Some(webhooks::Settings {
            signer,
            timeout: self.webhook_timeout,
            retention: self.webhook_retention,
            schedule: self.webhook_schedule.0.clone(),
            disable_after: Some(self.webhook_disable_after).filter(|d| !d.is_zero()),
        }))
    }

    /// The secrets, checked without printing them.
    pub fn validate(&self) -> Result<(), String> {
        self.settings().map(drop)
    }
}

/// An http(s) URL with a host (`endpoints::parse_url`, as the admin route reads it).
fn endpoint(s: &str) -> Result<String, String> {
    endpoints::parse_url(s)
}

/// `0s,5s,5m`: 1 to 20 pauses of at most a day.
fn schedule(s: &str) -> Result<Schedule, String> {
    let pauses = s.split(',').map(|p| duration(p.trim())).collect::<Result<Vec<_>, _>>()?;
    if pauses.is_empty() || pauses.len() > 20 || pauses.iter().any(|p| *p > Duration::from_secs(24 * 3600)) {
        return Err("the schedule is 1 to 20 comma-separated pauses of at most 1d each".into());
    }
    Ok(Schedule(pauses))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Cli;

    fn parse(args: &[&str]) -> Result<WebhookConfig, clap::Error> {
        Cli::try_parse_from([&["seckill", "migrate"], args].concat()).map(|cli| cli.config().unwrap().webhooks)
    }

    #[test]
    fn webhooks_are_off_by_default_with_the_spec_schedule() {
        let config = parse(&[]).unwrap();
        assert!(config.settings().unwrap().is_none() && config.webhook_url.is_empty());
        assert_eq!(config.webhook_disable_after, Duration::from_secs(3 * 24 * 3600));
        assert_eq!(config.webhook_schedule.0.len(), 8);
        assert_eq!(config.webhook_schedule.0[2], Duration::from_secs(300));
        assert_eq!(
            (config.webhook_timeout, config.webhook_retention),
            (Duration::from_secs(5), Duration::from_secs(604_800))
        );
        assert_eq!(WebhookConfig::default().webhook_schedule, config.webhook_schedule);
    }

    #[test]
    fn endpoints_are_http_urls_and_need_a_secret() {
        assert!(parse(&["--webhook-url", "ftp://example.test/x"]).is_err());
        assert!(parse(&["--webhook-url", "file:///etc/passwd"]).is_err());
        let two = parse(&["--webhook-url", "http://127.0.0.1:9/a,https://shop.test/hook"]).unwrap();
        assert_eq!(two.webhook_url.len(), 2);
        assert!(two.validate().unwrap_err().contains("SECKILL_WEBHOOK_SECRET"));
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let set = parse(&["--webhook-url", "http://127.0.0.1:9/a", "--webhook-secret", secret]).unwrap();
        assert_eq!(set.webhook_url, ["http://127.0.0.1:9/a"]);
        assert!(set.settings().unwrap().unwrap().disable_after.is_some());
        // The secret alone: this instance sends to the endpoints registered by others.
        let dispatching = parse(&["--webhook-secret", secret, "--webhook-disable-after", "0s"]).unwrap();
        assert_eq!(dispatching.settings().unwrap().unwrap().disable_after, None, "0s: never disabled");
        let many: Vec<String> = (0..=MAX_ENDPOINTS).map(|i| format!("http://127.0.0.1:9/{i}")).collect();
        let too_many = parse(&["--webhook-url", &many.join(","), "--webhook-secret", secret]).unwrap();
        assert!(too_many.validate().unwrap_err().contains("more than"));
        assert!(parse(&["--webhook-schedule", "0s,soon"]).is_err());
    }
}
