//! What `POST /buy` and `GET /sales/{id}/order` share before they touch a sale: who the buyer is
//! ([`buyer`]), the rate limits ([`check`]: the client's address, then the buyer's) and the
//! `RateLimit` headers that report them ([`set_headers`]).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use anyhow::Context;

use crate::domain::UserId;
use crate::http::error::ApiError;
use crate::http::{AppState, bearer};
use crate::limiter::{self, Decision};

/// `RateLimit-Policy`: the quota policy (draft-ietf-httpapi-ratelimit-headers).
const POLICY_HEADER: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: this client's remaining quota and the seconds until it resets.
const STATE_HEADER: HeaderName = HeaderName::from_static("ratelimit");

/// Which limit decided, so which the `RateLimit` header fields describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The per-client-address limit.
    Address,
    /// The per-buyer limit.
    Buyer,
}

/// A limiter's decision, and whose.
pub type Decided = (Limit, Decision);

/// The buyer: the bearer token's under `SECKILL_AUTH=jwt` (verified from the token alone, before
/// any limiter; a `claimed` user other than it is refused with 403 `user_mismatch`), else the
/// `claimed` one, which is then required.
pub fn buyer(req: &HttpRequest, state: &AppState, claimed: Option<String>) -> Result<UserId, ApiError> {
    match &state.verifier {
        Some(verifier) => {
            let buyer = bearer::buyer(req, verifier)?;
            if claimed.is_some_and(|claimed| claimed != buyer.as_str()) {
                return Err(ApiError::UserMismatch);
            }
            Ok(buyer)
        }
        None => UserId::parse(&claimed.ok_or_else(|| ApiError::InvalidRequest("user_id is required".into()))?)
            .map_err(ApiError::InvalidRequest),
    }
}

/// The client's address limit, then the buyer's (if one is set); `decided` says which to report.
/// Once refused, a client or buyer is answered 429 from memory until that limiter could admit it
/// again. If a limiter cannot answer, the request is refused with 503 (fail closed).
pub async fn check(
    state: &AppState,
    client: IpAddr,
    user: &UserId,
    decided: &mut Option<Decided>,
) -> Result<(), ApiError> {
    limit_address(state, client, decided).await?;
    limit_buyer(state, user, decided).await?;
    state.metrics.limiter_decision("allowed");
    Ok(())
}

/// The answer to a rate-limited route: the outcome or its error, with the `RateLimit` headers
/// ([`set_headers`]). A 5xx keeps its `ApiError` attached, for the metrics middleware to count
/// its cause.
pub fn respond(state: &AppState, decided: Option<Decided>, outcome: Result<HttpResponse, ApiError>) -> HttpResponse {
    let mut response = outcome.unwrap_or_else(|err| {
        if err.status_code().is_server_error() { HttpResponse::from_error(err) } else { err.error_response() }
    });
    set_headers(state, decided, &mut response);
    response
}

/// Every answer carries `RateLimit-Policy`, and `RateLimit` whenever a limiter decided. With a
/// per-buyer limit set, both describe the limit closer to refusing: the one that refused, or the
/// one with fewer requests remaining (policy `"buyer"`).
fn set_headers(state: &AppState, decided: Option<Decided>, response: &mut HttpResponse) {
    let (policy, field) = match (decided, &state.buyer_limiter) {
        (Some((Limit::Buyer, decision)), Some((buyers, header))) => {
            (header, Some(buyers.policy.state_field(&decision)))
        }
        (Some((_, decision)), _) => (&state.rate_limit_policy, Some(state.limiter.policy.state_field(&decision))),
        (None, _) => (&state.rate_limit_policy, None),
    };
    let headers = response.headers_mut();
    headers.insert(POLICY_HEADER, policy.clone());
    if let Some(field) = field {
        headers.insert(STATE_HEADER, HeaderValue::from_str(&field).expect("ASCII header value"));
    }
}

/// The client's address limit: from memory if it was refused lately, else from Redis.
async fn limit_address(state: &AppState, client: IpAddr, decided: &mut Option<Decided>) -> Result<(), ApiError> {
    let metrics = &state.metrics;
    if let Some(refusal) = state.limiter.remembered(&client) {
        metrics.limiter_decision("refused_from_memory");
        *decided = Some((Limit::Address, refusal));
        return Err(rate_limited(refusal.retry_after));
    }
    let asked = Instant::now();
    let verdict = state.limiter.policy.check(&state.redis, client).await.context("rate limiter").map_err(|err| {
        metrics.limiter_decision("error");
        ApiError::Unavailable(err)
    })?;
    *decided = Some((Limit::Address, verdict));
    if !verdict.allowed {
        metrics.limiter_decision("refused");
        state.limiter.remember(&client, asked, &verdict);
        return Err(rate_limited(verdict.retry_after));
    }
    Ok(())
}

/// The buyer's limit, if one is set, after the address limit admitted the request: a refusal
/// answers 429 with the buyer's fields; an admission takes over the fields if the buyer has
/// fewer requests left than the address.
async fn limit_buyer(state: &AppState, user: &UserId, decided: &mut Option<Decided>) -> Result<(), ApiError> {
    let Some((buyers, _)) = &state.buyer_limiter else { return Ok(()) };
    let metrics = &state.metrics;
    if let Some(refusal) = buyers.remembered(user) {
        metrics.limiter_decision("buyer_refused_from_memory");
        *decided = Some((Limit::Buyer, refusal));
        return Err(rate_limited(refusal.retry_after));
    }
    let asked = Instant::now();
    let verdict = buyers.policy.check_buyer(&state.redis, user).await.context("per-buyer limiter").map_err(|err| {
        metrics.limiter_decision("error");
        ApiError::Unavailable(err)
    })?;
    if !verdict.allowed {
        metrics.limiter_decision("buyer_refused");
        *decided = Some((Limit::Buyer, verdict));
        buyers.remember(user, asked, &verdict);
        return Err(rate_limited(verdict.retry_after));
    }
    if decided.is_none_or(|(_, address)| verdict.remaining < address.remaining) {
        *decided = Some((Limit::Buyer, verdict));
    }
    Ok(())
}

/// 429 with `Retry-After` in whole seconds, rounded up (at least 1).
pub fn rate_limited(wait: Duration) -> ApiError {
    ApiError::RateLimited { retry_after_secs: limiter::ceil_secs(wait).max(1) }
}
