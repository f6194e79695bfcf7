//! The IETF `RateLimit` header fields (draft-ietf-httpapi-ratelimit-headers) on every answer of a
//! rate-limited route: `RateLimit-Policy` always, `RateLimit` whenever a limit decided. With a
//! per-buyer limit set, both describe the limit closer to refusing: the one that refused, or the
//! one with fewer requests remaining (policy `"buyer"`).

use actix_web::http::header::{HeaderName, HeaderValue, InvalidHeaderValue};
use actix_web::{HttpResponse, ResponseError};

use super::error::ApiError;
use crate::shop::{Limit, Limits, Reported};

/// `RateLimit-Policy`: the quota policy.
const POLICY_HEADER: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: this client's remaining quota and the seconds until it resets.
const STATE_HEADER: HeaderName = HeaderName::from_static("ratelimit");

/// The `RateLimit-Policy` values, formatted once per process.
#[derive(Debug, Clone)]
pub struct RateLimitFields {
    address: HeaderValue,
    buyer: Option<HeaderValue>,
}

impl RateLimitFields {
    /// The fields of `limits`' policies.
    pub fn new(limits: &Limits) -> Result<Self, InvalidHeaderValue> {
        let (address, buyer) = limits.policy_fields();
        Ok(Self {
            address: HeaderValue::from_str(&address)?,
            buyer: buyer.as_deref().map(HeaderValue::from_str).transpose()?,
        })
    }

    /// The answer to a rate-limited route: the outcome or its error, with the fields. A 5xx keeps
    /// its `ApiError` attached, for the metrics middleware to count its cause.
    pub fn respond(&self, reported: Option<Reported>, outcome: Result<HttpResponse, ApiError>) -> HttpResponse {
        let mut response = outcome.unwrap_or_else(|err| {
            if err.status_code().is_server_error() { HttpResponse::from_error(err) } else { err.error_response() }
        });
        let policy = match (&reported, &self.buyer) {
            (Some(Reported { limit: Limit::Buyer, .. }), Some(buyer)) => buyer,
            _ => &self.address,
        };
        let headers = response.headers_mut();
        headers.insert(POLICY_HEADER, policy.clone());
        if let Some(reported) = reported {
            headers.insert(STATE_HEADER, HeaderValue::from_str(&reported.state).expect("ASCII header value"));
        }
        response
    }
}
