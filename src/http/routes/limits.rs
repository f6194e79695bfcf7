//! What `POST /buy` and `GET /sales/{id}/order` share before they touch a sale: who the buyer is
//! ([`buyer`]), the rate limits (the client's address, then the buyer's: [`gates`] for the
//! purchase's own call and [`settle`] of its decisions, or [`check`] in calls of their own) and
//! the `RateLimit` headers that report them ([`set_headers`]).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use anyhow::Context;

use uuid::Uuid;

use crate::domain::{SaleId, UserId};
use crate::http::error::ApiError;
use crate::http::{AppState, bearer};
use crate::limiter::{self, Decision, Gate};

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

/// The request's limits for a purchase to check in its own call ([`crate::purchase::Sales::buy`]):
/// the client's address limit, then the buyer's (if one is set), counted as
/// `SECKILL_RATE_LIMIT_SCOPE` says. A limit that refused this client (or buyer) lately, on the
/// same key, answers 429 from memory instead, until it could admit it again.
pub fn gates<'s>(
    state: &'s AppState,
    client: IpAddr,
    user: &UserId,
    sale: &SaleId,
    decided: &mut Option<Decided>,
) -> Result<Vec<Gate<'s>>, ApiError> {
    let (metrics, scope, prefix) = (&state.metrics, state.rate_limit_scope, state.redis.prefix());
    let address = scope.client_gate(&state.limiter.policy, prefix, sale, client);
    if let Some(refusal) = state.limiter.remembered(&address.key) {
        metrics.limiter_decision("refused_from_memory");
        *decided = Some((Limit::Address, refusal));
        return Err(rate_limited(refusal.retry_after));
    }
    let mut gates = vec![address];
    if let Some((buyers, _)) = &state.buyer_limiter {
        let buyer = scope.buyer_gate(&buyers.policy, prefix, sale, user);
        if let Some(refusal) = buyers.remembered(&buyer.key) {
            metrics.limiter_decision("buyer_refused_from_memory");
            *decided = Some((Limit::Buyer, refusal));
            return Err(rate_limited(refusal.retry_after));
        }
        gates.push(buyer);
    }
    Ok(gates)
}

/// The decisions of the [`gates`] (as many as were checked, in order), asked at `asked`: a
/// refusal answers 429 and is remembered; `decided` says which limit to report.
pub fn settle(
    state: &AppState,
    gates: &[Gate<'_>],
    asked: Instant,
    decisions: &[Decision],
    decided: &mut Option<Decided>,
) -> Result<(), ApiError> {
    let metrics = &state.metrics;
    if let (Some(decision), Some(gate)) = (decisions.first(), gates.first()) {
        *decided = Some((Limit::Address, *decision));
        if !decision.allowed {
            metrics.limiter_decision("refused");
            state.limiter.remember(&gate.key, asked, decision);
            return Err(rate_limited(decision.retry_after));
        }
    }
    if let (Some(decision), Some(gate), Some((buyers, _))) = (decisions.get(1), gates.get(1), &state.buyer_limiter) {
        if !decision.allowed {
            metrics.limiter_decision("buyer_refused");
            *decided = Some((Limit::Buyer, *decision));
            buyers.remember(&gate.key, asked, decision);
            return Err(rate_limited(decision.retry_after));
        }
        // The fields describe the limit closer to refusing.
        if decided.is_none_or(|(_, address)| decision.remaining < address.remaining) {
            *decided = Some((Limit::Buyer, *decision));
        }
    }
    metrics.limiter_decision("allowed");
    Ok(())
}

/// The client's address limit, then the buyer's, each in a call of its own (for a route that
/// buys nothing): [`gates`], checked one by one, then [`settle`]d. If a limit cannot answer, the
/// request is refused with 503 (fail closed).
pub async fn check(
    state: &AppState,
    client: IpAddr,
    user: &UserId,
    sale: &SaleId,
    decided: &mut Option<Decided>,
) -> Result<(), ApiError> {
    let gates = gates(state, client, user, sale, decided)?;
    let (asked, nonce) = (Instant::now(), Uuid::now_v7().simple().to_string());
    let mut decisions = Vec::with_capacity(gates.len());
    for gate in &gates {
        let decision = gate.check(&mut state.redis.conn(), &nonce).await.context("rate limiter").map_err(|err| {
            state.metrics.limiter_decision("error");
            ApiError::Unavailable(err)
        })?;
        decisions.push(decision);
        if !decision.allowed {
            break;
        }
    }
    settle(state, &gates, asked, &decisions, decided)
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

/// 429 with `Retry-After` in whole seconds, rounded up (at least 1).
pub fn rate_limited(wait: Duration) -> ApiError {
    ApiError::RateLimited { retry_after_secs: limiter::ceil_secs(wait).max(1) }
}
