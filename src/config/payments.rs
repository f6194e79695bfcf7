//! Payment windows: `SECKILL_PAYMENT_WINDOW`, the default of a sale's `payment_window`, and
//! `SECKILL_PAYMENT_SECRET`, the key of the payment events' signatures (`crate::reservations`).

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::secret;
use crate::reservations::payment_window;

/// Shortest payment event secret accepted, in bytes.
pub const MIN_PAYMENT_SECRET_BYTES: usize = 32;

/// Reservations and their payment (docs/reservations.md).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PaymentConfig {
    /// How long a win may wait for its payment, for sales seeded without `payment_window`
    /// (e.g. 15m). Unset: orders are final at once (no reservations).
    #[arg(long, env = "SECKILL_PAYMENT_WINDOW", value_parser = payment_window, global = true)]
    pub payment_window: Option<Duration>,

    /// The key (at least 32 bytes) of the HMAC-SHA256 signatures on POST /payments/events
    /// (header Seckill-Signature). Unset: payment events are refused (503 payments_disabled).
    #[arg(long, env = "SECKILL_PAYMENT_SECRET", value_parser = secret, hide_env_values = true, global = true)]
    pub payment_secret: Option<SecretString>,
}

impl PaymentConfig {
    /// The secret's length (clap cannot check it without printing it).
    pub fn validate(&self) -> Result<(), String> {
        match &self.payment_secret {
            Some(secret) if secret.expose_secret().len() < MIN_PAYMENT_SECRET_BYTES => Err(format!(
                "SECKILL_PAYMENT_SECRET must be at least {MIN_PAYMENT_SECRET_BYTES} bytes (e.g. `openssl rand -hex 32`)"
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Cli;

    #[test]
    fn windows_are_off_by_default_and_bounded() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["seckill", "migrate"], args].concat());
        assert_eq!(parse(&[]).unwrap().config().unwrap().payments.payment_window, None);
        let set = parse(&["--payment-window", "15m"]).unwrap().config().unwrap().payments;
        assert_eq!(set.payment_window, Some(Duration::from_secs(900)));
        for bad in ["0s", "500ms", "8d", "soon"] {
            assert!(parse(&["--payment-window", bad]).is_err(), "{bad}");
        }
        let short = parse(&["--payment-secret", "short"]).unwrap().config().unwrap().payments;
        assert!(short.validate().unwrap_err().contains("32 bytes"));
        assert!(!short.validate().unwrap_err().contains("short"), "the error never names the secret");
    }
}
