//! `POST /buy`: validate, rate-limit the client, then one atomic purchase in Redis.

use std::net::{IpAddr, Ipv4Addr};

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::AppState;
use crate::domain::{SaleId, UserId};
use crate::error::ApiError;
use crate::redis_store::BuyOutcome;
use crate::sold_out::{self, Flagged};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuyRequest {
    sale_id: String,
    user_id: String,
}

/// The 201 body: the order the worker will store in Postgres under the same id.
#[derive(Debug, Serialize)]
pub struct BuyResponse {
    pub order_id: Uuid,
    pub sale_id: String,
    pub user_id: String,
}

/// Input is validated first, so malformed requests touch no state. A sale this instance knows to
/// be sold out is answered from memory: 410, or 409 to one of its buyers (no limiter either: an
/// answer from memory costs less than the limiter would). Then the limiter runs before the
/// purchase, so an abusive client costs one script call, not a purchase attempt; once refused, it
/// is answered 429 from memory until the limiter would admit it again (see `crate::refusals`).
pub async fn buy(
    req: HttpRequest,
    body: web::Json<BuyRequest>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let BuyRequest { sale_id, user_id } = body.into_inner();
    let sale = SaleId::parse(&sale_id).map_err(ApiError::InvalidRequest)?;
    let user = UserId::parse(&user_id).map_err(ApiError::InvalidRequest)?;
    match state.sold_out.check(&sale, &user) {
        None => {}
        Some(Flagged::SoldOut) => return Err(ApiError::SoldOut),
        Some(Flagged::AlreadyPurchased) => return Err(ApiError::AlreadyPurchased),
        Some(Flagged::AskRedis) => {
            let bought = state.redis.is_buyer(&sale, &user).await?;
            return Err(if bought { ApiError::AlreadyPurchased } else { ApiError::SoldOut });
        }
    }

    let client = state.proxies.client_ip(&req).unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    if let Some(wait) = state.refusals.wait(client) {
        return Err(rate_limited(wait));
    }
    let decision = state.redis.rate_limit(client, state.rate_limit).await?;
    if !decision.allowed {
        state.refusals.refuse(client, decision.retry_after);
        return Err(rate_limited(decision.retry_after));
    }

    let order_id = Uuid::now_v7();
    match state.redis.buy(&sale, &user, order_id).await? {
        BuyOutcome::Purchased => Ok(HttpResponse::Created().json(BuyResponse { order_id, sale_id, user_id })),
        BuyOutcome::UnknownSale => Err(ApiError::UnknownSale),
        BuyOutcome::NotStarted => Err(ApiError::SaleNotStarted),
        BuyOutcome::Ended => Err(ApiError::SaleEnded),
        BuyOutcome::AlreadyPurchased => Err(ApiError::AlreadyPurchased),
        BuyOutcome::SoldOut => {
            if state.sold_out.set(&sale) {
                tokio::spawn(sold_out::load_buyers(state.sold_out.clone(), state.redis.clone(), sale));
            }
            Err(ApiError::SoldOut)
        }
    }
}

/// 429 with `Retry-After` in whole seconds, rounded up (at least 1).
fn rate_limited(wait: std::time::Duration) -> ApiError {
    ApiError::RateLimited { retry_after_secs: wait.as_millis().div_ceil(1000).max(1) as u64 }
}
