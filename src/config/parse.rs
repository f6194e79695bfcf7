//! The parsers of the settings' values (clap's `value_parser`s): durations, rate limits, secrets,
//! the admin token's length, trusted proxies and the key prefix.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use secrecy::SecretString;

use crate::limiter::RateLimit;

/// `REQUESTS/WINDOW`, e.g. `20/1s` (the bounds are checked with the algorithm, by
/// [`crate::limiter::Policy::new`]).
pub fn rate_limit(s: &str) -> Result<RateLimit, String> {
    let (limit, window) =
        s.split_once('/').ok_or_else(|| format!("expected REQUESTS/WINDOW such as 20/1s, got {s:?}"))?;
    let limit: u32 = limit.trim().parse().map_err(|_| format!("REQUESTS must be a positive integer, got {limit:?}"))?;
    let window = duration(window.trim())?;
    if limit == 0 || window.as_millis() == 0 {
        return Err("REQUESTS and WINDOW must both be at least 1 (WINDOW in whole ms)".into());
    }
    Ok(RateLimit { limit, window })
}

/// A secret setting. It never fails: clap's error would print the value it refuses, so secrets
/// are checked by [`super::Config::validate`] (or where they are used), whose errors never name
/// them.
pub(super) fn secret(s: &str) -> Result<SecretString, String> {
    Ok(SecretString::from(s.to_owned()))
}

/// Shortest admin token accepted, in bytes.
pub const MIN_ADMIN_TOKEN_BYTES: usize = 32;

pub(super) fn admin_token(s: &str) -> Result<(), String> {
    if s.len() < MIN_ADMIN_TOKEN_BYTES {
        return Err(format!(
            "SECKILL_ADMIN_TOKEN must be at least {MIN_ADMIN_TOKEN_BYTES} bytes, got {} (e.g. `openssl rand -hex 32`)",
            s.len()
        ));
    }
    Ok(())
}

pub(super) fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 500ms or 2s: {e}"))
}

/// The sold-out flag's time to live: 100 ms to an hour.
pub(super) fn flag_ttl(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    let range = Duration::from_millis(100)..=Duration::from_secs(3600);
    if range.contains(&d) { Ok(d) } else { Err(format!("{s:?}: the sold-out flag's time to live is 100ms-1h")) }
}

pub(super) fn trusted_proxy(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{s:?} is neither an IP address nor a CIDR"))
}

pub(super) fn key_prefix(s: &str) -> Result<String, String> {
    let ok = !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_graphic() && c != '{' && c != '}');
    if ok { Ok(s.to_owned()) } else { Err("the key prefix is 1-64 visible ASCII characters without braces".into()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_parses_requests_and_window() {
        let r = rate_limit("20/1s").unwrap();
        assert_eq!(r, RateLimit { limit: 20, window: Duration::from_secs(1) });
        let r = rate_limit("5 / 250ms").unwrap();
        assert_eq!(r, RateLimit { limit: 5, window: Duration::from_millis(250) });
    }

    #[test]
    fn rate_limit_rejects_nonsense() {
        for bad in ["", "20", "0/1s", "20/0s", "x/1s", "20/soon", "-1/1s"] {
            assert!(rate_limit(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn trusted_proxies_accept_ips_and_cidrs() {
        assert_eq!(trusted_proxy("10.0.0.1").unwrap(), "10.0.0.1/32".parse::<IpNet>().unwrap());
        assert_eq!(trusted_proxy("10.0.0.0/8").unwrap(), "10.0.0.0/8".parse::<IpNet>().unwrap());
        assert!(trusted_proxy("::1").is_ok());
        assert!(trusted_proxy("proxy.local").is_err());
    }

    #[test]
    fn key_prefix_refuses_braces() {
        assert!(key_prefix("seckill").is_ok());
        assert!(key_prefix("a{b").is_err());
        assert!(key_prefix("").is_err());
    }
}
