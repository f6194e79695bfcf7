//! Waiting rooms (`crate::admission`): how long an admitted buyer has to buy, and the key of
//! the tickets and admission tokens.

use std::time::Duration;

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

use super::secret;

/// Shortest admission secret accepted, in bytes.
pub const MIN_ADMISSION_SECRET_BYTES: usize = 32;

/// Queued sales (docs/waiting-room.md).
#[derive(Debug, Clone, clap::Args)]
pub struct AdmissionConfig {
    /// How long an admitted buyer of a queued sale has to buy, from its admission (5s to 1h);
    /// recorded with each sale at its seed. Unused, the admission lapses for good.
    #[arg(long, env = "SECKILL_ADMISSION_TTL", default_value = "60s", value_parser = admission_ttl, global = true)]
    pub admission_ttl: Duration,

    /// The key (at least 32 bytes) of the waiting room's tickets and admission tokens; every
    /// instance needs the same. Unset: derived from SECKILL_ADMIN_TOKEN (without either, queued
    /// sales cannot be joined).
    #[arg(long, env = "SECKILL_ADMISSION_SECRET", value_parser = secret, hide_env_values = true, global = true)]
    pub admission_secret: Option<SecretString>,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self { admission_ttl: Duration::from_secs(60), admission_secret: None }
    }
}

impl AdmissionConfig {
    /// The secret's length (clap cannot check it without printing it).
    pub fn validate(&self) -> Result<(), String> {
        match &self.admission_secret {
            Some(secret) if secret.expose_secret().len() < MIN_ADMISSION_SECRET_BYTES => Err(format!(
                "SECKILL_ADMISSION_SECRET must be at least {MIN_ADMISSION_SECRET_BYTES} bytes (e.g. `openssl rand \
                    -hex 32`)"
            )),
            _ => Ok(()),
        }
    }

    /// The signing key: the secret, else one derived from the admin token (HMAC-SHA256 of a fixed
    /// label under it, so the token itself never signs anything a buyer sees).
    pub fn key(&self, admin_token: Option<&SecretString>) -> Option<Vec<u8>> {
        if let Some(secret) = &self.admission_secret {
            return Some(secret.expose_secret().as_bytes().to_vec());
        }
        let token = admin_token?;
        let mut mac = Hmac::<Sha256>::new_from_slice(token.expose_secret().as_bytes()).expect("any key length");
        mac.update(b"seckill admission key v1");
        Some(mac.finalize().into_bytes().to_vec())
    }
}

fn admission_ttl(s: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 60s: {e}"))?;
    if ttl < Duration::from_secs(5) || ttl > Duration::from_secs(3600) {
        return Err(format!("an admission must last between 5s and 1h, got {s:?}"));
    }
    Ok(ttl)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Cli;

    #[test]
    fn the_ttl_is_bounded_and_the_key_falls_back_to_the_admin_token() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["seckill", "migrate"], args].concat());
        assert_eq!(parse(&[]).unwrap().config().unwrap().admission.admission_ttl, Duration::from_secs(60));
        for bad in ["1s", "2h", "soon"] {
            assert!(parse(&["--admission-ttl", bad]).is_err(), "{bad}");
        }
        let config = parse(&[]).unwrap().config().unwrap().admission;
        assert_eq!(config.key(None), None);
        let admin = SecretString::from("a".repeat(32));
        let derived = config.key(Some(&admin)).unwrap();
        assert_ne!(derived, b"a".repeat(32), "the admin token itself never signs");
        let set = parse(&["--admission-secret", &"s".repeat(32)]).unwrap().config().unwrap().admission;
        assert_eq!(set.key(Some(&admin)).unwrap(), b"s".repeat(32));
        let short = parse(&["--admission-secret", "short"]).unwrap().config().unwrap().admission;
        assert!(short.validate().unwrap_err().contains("32 bytes"));
    }
}
