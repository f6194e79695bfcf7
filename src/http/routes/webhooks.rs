//! The webhook endpoints (`crate::shop::Shop::webhook_endpoints`, `register_webhook`,
//! `remove_webhook`, `enable_webhook`): `GET /admin/webhooks` (each with its state and counts),
//! `POST /admin/webhooks` (`{"url"}`), `DELETE /admin/webhooks/{id}` and `POST
//! /admin/webhooks/{id}/enable`. Admin token, as every admin route.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::admin::AdminErrors;
use super::object::Object;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::{Operator, Viewer};
use crate::http::views::EndpointView;
use crate::shop::RemovedEndpoint;

/// An endpoint to register, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// An http:// or https:// URL with a host, at most 2048 bytes.
    #[schema(max_length = 2048, pattern = "^https?://[^\\s/?#]+", example = "https://shop.example/hooks/seckill")]
    url: String,
}

/// Every registered endpoint, in the order registered.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EndpointList {
    pub endpoints: Vec<EndpointView>,
}

/// What removing an endpoint did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Removed {
    pub id: i64,
    pub url: String,
    /// Its open deliveries, dropped (its settled ones stay listed until their retention).
    pub dropped: i64,
}

/// What re-enabling an endpoint did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Enabled {
    pub endpoint: EndpointView,
    /// Deliveries its disabling had closed, due again at once with a fresh schedule.
    pub reopened: u64,
}

/// Every registered endpoint with its state (`enabled`, `disabled` and why) and its open and
/// failed deliveries.
#[utoipa::path(
    get,
    path = "/admin/webhooks",
    tag = "admin",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The endpoints", body = EndpointList),
        AdminErrors,
    )
)]
pub async fn list(_viewer: Viewer, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let endpoints = state.shop.webhook_endpoints().await?;
    Ok(HttpResponse::Ok().json(EndpointList { endpoints: endpoints.into_iter().map(EndpointView::from).collect() }))
}

/// Registers an endpoint: every instance writes it a delivery of every order event from now on
/// (events written before are not sent to it). A URL already registered is left as it is (200; a
/// disabled endpoint stays disabled). At most 16 endpoints.
#[utoipa::path(
    post,
    path = "/admin/webhooks",
    tag = "admin",
    security(("bearer" = [])),
    request_body = RegisterRequest,
    responses(
        (status = 201, description = "Registered", body = EndpointView),
        (status = 200, description = "Already registered; as it is", body = EndpointView),
        (status = 409, description = "`too_many_endpoints`: 16 are registered", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn register(
    operator: Operator,
    body: web::Json<Object<RegisterRequest>>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let RegisterRequest { url } = body.into_inner().0;
    let (endpoint, new) = state.shop.register_webhook(&url, operator.actor()).await?;
    let mut answer = if new { HttpResponse::Created() } else { HttpResponse::Ok() };
    Ok(answer.json(EndpointView::from(endpoint)))
}

/// Removes an endpoint: no event goes to it from now on, and its open deliveries are dropped.
#[utoipa::path(
    delete,
    path = "/admin/webhooks/{id}",
    tag = "admin",
    params(("id" = i64, Path, description = "The endpoint's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Removed", body = Removed),
        (status = 404, description = "`unknown_endpoint`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn remove(
    operator: Operator,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let RemovedEndpoint { id, url, dropped } = state.shop.remove_webhook(path.into_inner(), operator.actor()).await?;
    Ok(HttpResponse::Ok().json(Removed { id, url, dropped }))
}

/// Re-enables an endpoint the dispatcher disabled: it gets the events written from now on, and
/// the deliveries its disabling closed are sent again at once (the events written while it was
/// disabled are not: `GET /admin/events` lists them). An enabled endpoint is left as it is.
#[utoipa::path(
    post,
    path = "/admin/webhooks/{id}/enable",
    tag = "admin",
    params(("id" = i64, Path, description = "The endpoint's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Enabled", body = Enabled),
        (status = 404, description = "`unknown_endpoint`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn enable(
    operator: Operator,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let (endpoint, reopened) = state.shop.enable_webhook(path.into_inner(), operator.actor()).await?;
    Ok(HttpResponse::Ok().json(Enabled { endpoint: EndpointView::from(endpoint), reopened }))
}
