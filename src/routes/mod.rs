//! HTTP routes and the state they share.

mod admin;
mod buy;
mod health;

use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use secrecy::SecretString;
use sqlx::PgPool;

use crate::client_ip::TrustedProxies;
use crate::config::RateLimit;
use crate::error::ApiError;
use crate::redis_store::RedisStore;
use crate::refusals::RecentRefusals;
use crate::sold_out::SoldOutFlags;

pub use admin::SaleStatus;

/// Largest request body accepted; larger ones answer 413.
pub const MAX_BODY_BYTES: usize = 4 * 1024;

/// What every handler can reach. Cheap to clone: the clients inside are shared handles.
#[derive(Clone)]
pub struct AppState {
    pub redis: RedisStore,
    /// Sales this instance knows to be sold out (answered without Redis).
    pub sold_out: Arc<SoldOutFlags>,
    pub pool: PgPool,
    pub rate_limit: RateLimit,
    /// Clients the limiter refused, answered 429 without Redis until they may try again.
    pub refusals: Arc<RecentRefusals>,
    pub proxies: TrustedProxies,
    /// `None`: admin routes are disabled and answer 403.
    pub admin_token: Option<SecretString>,
}

/// Registers every route on an actix `App`.
pub fn configure(state: AppState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        let json = web::JsonConfig::default()
            .limit(MAX_BODY_BYTES)
            .content_type_required(true)
            .error_handler(|err, _req| ApiError::from(err).into());
        let path =
            web::PathConfig::default().error_handler(|err, _req| ApiError::InvalidRequest(err.to_string()).into());
        cfg.app_data(web::Data::new(state))
            .app_data(json)
            .app_data(path)
            .service(web::resource("/buy").route(web::post().to(buy::buy)).default_service(web::to(method_not_allowed)))
            .service(
                web::resource("/admin/sales/{sale_id}")
                    .route(web::put().to(admin::seed))
                    .route(web::get().to(admin::status))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/admin/sales/{sale_id}/reconcile")
                    .route(web::get().to(admin::reconcile_check))
                    .route(web::post().to(admin::reconcile_repair))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/healthz")
                    .route(web::get().to(health::healthz))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/readyz")
                    .route(web::get().to(health::readyz))
                    .default_service(web::to(method_not_allowed)),
            )
            .default_service(web::to(not_found));
    }
}

async fn not_found(_req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}

async fn method_not_allowed(_req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed)
}
