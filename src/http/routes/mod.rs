//! Every route, registered by [`configure`]: one file per resource (`buy`, `sales`, `order`, `queue`,
//! `challenge`, `payments`, `admin`, `seed`, `controls`, `order_actions`, `drops` (its answers in
//! `drop_answers`), `drop_page`, `exports`, `events`, `webhooks`, `retire`, `reconcile`,
//! `admin_page`, `buyer_page`, `favicon`, `health`, `openapi`; `page` is what the two HTML pages
//! share, `object` what every JSON body is read as, `responses` and `user_id` what the routes'
//! OpenAPI annotations share), and here the routing itself, 404/405, the sale id of a path and
//! `GET /metrics`.

mod admin;
mod admin_page;
mod buy;
mod buyer_page;
mod challenge;
mod controls;
mod draw_entries;
mod draw_run;
mod drop_answers;
mod drop_page;
mod drops;
mod events;
mod exports;
mod favicon;
mod health;
mod object;
mod openapi;
mod order;
mod order_actions;
mod page;
mod payments;
mod queue;
mod reconcile;
mod responses;
mod retire;
mod sales;
mod seed;
mod small_body;
mod user_id;
mod webhooks;

use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder, guard, web};

use super::AppState;
use super::error::ApiError;
use crate::domain::{DropId, SaleId};
use crate::shop::LineId;

pub use admin::{SaleStatus, SalesOverview};
pub use openapi::ApiDoc;

/// Largest request body accepted; larger ones answer 413.
pub const MAX_BODY_BYTES: usize = 4 * 1024;

/// Which routes a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// Every route (no separate metrics listener).
    All,
    /// The API and pages, without `/metrics` and `/readyz` (they are on the metrics listener).
    Public,
    /// `/metrics`, `/readyz` and `/healthz` only (`SECKILL_METRICS_LISTEN`).
    Operations,
}

/// Registers the routes `listener` serves on an actix `App`.
pub fn configure(state: AppState, listener: Listener) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        // Every JSON body is read as an `object::Object`: a struct from a JSON object only.
        let json = web::JsonConfig::default()
            .limit(MAX_BODY_BYTES)
            .content_type_required(true)
            .error_handler(|err, _req| ApiError::from(err).into());
        let path =
            web::PathConfig::default().error_handler(|err, _req| ApiError::InvalidRequest(err.to_string()).into());
        let query =
            web::QueryConfig::default().error_handler(|err, _req| ApiError::InvalidRequest(err.to_string()).into());
        cfg.app_data(web::Data::new(state)).app_data(json).app_data(path).app_data(query);
        if listener != Listener::Public {
            cfg.service(web::resource("/metrics").route(read().to(metrics)).default_service(allow("GET, HEAD")))
                .service(web::resource("/readyz").route(read().to(health::readyz)).default_service(allow("GET, HEAD")));
        }
        cfg.service(web::resource("/healthz").route(read().to(health::healthz)).default_service(allow("GET, HEAD")));
        if listener == Listener::Operations {
            cfg.default_service(web::to(not_found));
            return;
        }
        cfg.service(
            web::resource("/openapi.json").route(read().to(openapi::openapi_json)).default_service(allow("GET, HEAD")),
        )
        .service(web::resource("/buy").route(web::post().to(buy::buy)).default_service(allow("POST")))
        .service(web::resource("/sales/{sale_id}").route(read().to(sales::sale)).default_service(allow("GET, HEAD")))
        .service(
            web::resource("/sales/{sale_id}/order")
                .route(read().to(order::order))
                .route(web::delete().to(order::cancel))
                .default_service(allow("DELETE, GET, HEAD")),
        )
        .service(
            web::resource("/sales/{sale_id}/queue")
                .route(read().to(queue::standing))
                .route(web::post().to(queue::join))
                .default_service(allow("GET, HEAD, POST")),
        )
        .service(
            web::resource("/sales/{sale_id}/challenge")
                .route(read().to(challenge::challenge))
                .default_service(allow("GET, HEAD")),
        )
        .service(
            web::resource("/drops/{drop_id}/queue")
                .route(read().to(queue::drop_standing))
                .route(web::post().to(queue::drop_join))
                .default_service(allow("GET, HEAD, POST")),
        )
        .service(
            web::resource("/drops/{drop_id}/entries")
                .route(web::post().to(draw_entries::enter))
                .default_service(allow("POST")),
        )
        .service(
            web::resource("/drops/{drop_id}/entry")
                .route(read().to(draw_entries::entry))
                .default_service(allow("GET, HEAD")),
        )
        .service(
            web::resource("/drops/{drop_id}/draw")
                .route(read().to(draw_run::record))
                .default_service(allow("GET, HEAD")),
        )
        .service(
            web::resource("/drops/{drop_id}/challenge")
                .route(read().to(challenge::drop_challenge))
                .default_service(allow("GET, HEAD")),
        )
        .service(
            web::resource("/payments/events").route(web::post().to(payments::event)).default_service(allow("POST")),
        )
        .service(web::resource("/").route(read().to(buyer_page::home)).default_service(allow("GET, HEAD")))
        .service(
            web::resource("/sale/{sale_id}").route(read().to(buyer_page::sale)).default_service(allow("GET, HEAD")),
        )
        .service(web::resource("/admin").route(read().to(admin_page::page)).default_service(allow("GET, HEAD")))
        .service(
            web::resource("/challenge-worker.js")
                .route(read().to(challenge::worker))
                .default_service(allow("GET, HEAD")),
        )
        .service(web::resource("/favicon.ico").route(read().to(favicon::icon)).default_service(allow("GET, HEAD")))
        .service(web::resource("/admin/me").route(read().to(admin::me)).default_service(allow("GET, HEAD")))
        .service(web::resource("/admin/sales").route(read().to(admin::list)).default_service(allow("GET, HEAD")))
        .service(
            web::resource("/admin/sales/{sale_id}")
                .route(web::put().to(seed::seed))
                .route(read().to(admin::status))
                .route(web::delete().to(retire::retire))
                .default_service(allow("DELETE, GET, HEAD, PUT")),
        )
        .service(control("/admin/sales/{sale_id}/pause", controls::pause))
        .service(control("/admin/sales/{sale_id}/resume", controls::resume))
        .service(control("/admin/sales/{sale_id}/end", controls::end))
        .service(
            web::resource("/admin/sales/{sale_id}/stock")
                .route(web::post().to(controls::stock))
                .default_service(allow("POST")),
        )
        .service(
            web::resource("/admin/sales/{sale_id}/orders")
                .route(read().to(exports::sale_orders))
                .default_service(allow("GET, HEAD")),
        )
        .service(
            web::resource("/admin/drops/{drop_id}/orders")
                .route(read().to(exports::drop_orders))
                .default_service(allow("GET, HEAD")),
        )
        .service(
            web::resource("/admin/sales/{sale_id}/audit")
                .route(read().to(controls::audit))
                .default_service(allow("GET, HEAD")),
        )
        .service(web::resource("/drop/{drop_id}").route(read().to(drop_page::page)).default_service(allow("GET, HEAD")))
        .service(web::resource("/drops/{drop_id}").route(read().to(drops::public)).default_service(allow("GET, HEAD")))
        .service(
            web::resource("/admin/drops/{drop_id}")
                .route(web::put().to(drops::seed))
                .route(read().to(drops::status))
                .default_service(allow("GET, HEAD, PUT")),
        )
        .service(control("/admin/drops/{drop_id}/pause", drops::pause))
        .service(control("/admin/drops/{drop_id}/resume", drops::resume))
        .service(control("/admin/drops/{drop_id}/end", drops::end))
        .service(control("/admin/drops/{drop_id}/stock", drops::stock))
        .service(control("/admin/drops/{drop_id}/draw", draw_run::run))
        .service(
            web::resource("/admin/drops/{drop_id}/draw/stats")
                .route(read().to(draw_run::stats))
                .default_service(allow("GET, HEAD")),
        )
        .service(
            web::resource("/admin/drops/{drop_id}/audit")
                .route(read().to(drops::audit))
                .default_service(allow("GET, HEAD")),
        )
        .service(web::resource("/admin/events").route(read().to(events::list)).default_service(allow("GET, HEAD")))
        .service(
            web::resource("/admin/events/{id}/retry")
                .route(web::post().to(events::retry))
                .default_service(allow("POST")),
        )
        .service(
            web::resource("/admin/webhooks")
                .route(read().to(webhooks::list))
                .route(web::post().to(webhooks::register))
                .default_service(allow("GET, HEAD, POST")),
        )
        .service(
            web::resource("/admin/webhooks/{id}")
                .route(web::delete().to(webhooks::remove))
                .default_service(allow("DELETE")),
        )
        .service(
            web::resource("/admin/webhooks/{id}/enable")
                .route(web::post().to(webhooks::enable))
                .default_service(allow("POST")),
        )
        .service(
            web::resource("/admin/orders/{order_id}/cancel")
                .route(web::post().to(order_actions::cancel))
                .default_service(allow("POST")),
        )
        .service(
            web::resource("/admin/orders/{order_id}/refund")
                .route(web::post().to(order_actions::refund))
                .default_service(allow("POST")),
        )
        .service(
            web::resource("/admin/late-payments")
                .route(read().to(payments::late_payments))
                .default_service(allow("GET, HEAD")),
        )
        .service(
            web::resource("/admin/sales/{sale_id}/reconcile")
                .route(read().to(reconcile::reconcile_check))
                .route(web::post().to(reconcile::reconcile_repair))
                .default_service(allow("GET, HEAD, POST")),
        )
        .default_service(web::to(not_found));
    }
}

/// The sale a path, a query or a body names: 400 `invalid_request` if malformed.
fn sale_of(raw: &str) -> Result<SaleId, ApiError> {
    SaleId::parse(raw).map_err(ApiError::InvalidRequest)
}

/// A drop's line from the path's drop id: 400 `invalid_request` if malformed.
fn drop_line_of(raw: &str) -> Result<LineId, ApiError> {
    DropId::parse(raw).map(LineId::Drop).map_err(ApiError::InvalidRequest)
}

async fn not_found(_req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}

/// A `POST`-only resource of the kill switch.
fn control<F, Args>(path: &str, handler: F) -> actix_web::Resource
where
    F: actix_web::Handler<Args>,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    web::resource(path).route(web::post().to(handler)).default_service(allow("POST"))
}

/// A route for `GET` and `HEAD` alike (RFC 9110 §9.3.2: HEAD is GET without the body, which
/// actix-http leaves out of the answer).
fn read() -> actix_web::Route {
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

/// A streamed answer of `body`, or, to a `HEAD`, the same head with no body at all: actix-http
/// leaves a HEAD answer's body out of what it writes but still reads the stream to its end, so a
/// HEAD of a draw record or an export read every page of it (queries, hashes) to send nothing,
/// with no slow client to hold it back.
pub(crate) fn streamed<S, E>(req: &HttpRequest, mut answer: HttpResponseBuilder, body: S) -> HttpResponse
where
    S: futures::Stream<Item = Result<web::Bytes, E>> + 'static,
    E: Into<Box<dyn std::error::Error>> + 'static,
{
    if req.method() == actix_web::http::Method::HEAD {
        drop(body); // the first page it read stays its only one
        return answer.streaming(futures::stream::empty::<Result<web::Bytes, E>>());
    }
    answer.streaming(body)
}

/// A resource's answer to any other method: 405 with `Allow: <methods>` (RFC 9110).
fn allow(methods: &'static str) -> actix_web::Route {
    web::to(move || async move { Err::<HttpResponse, _>(ApiError::MethodNotAllowed { allow: methods }) })
}

/// `GET /metrics`: Prometheus text exposition of this process's metrics.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text exposition", content_type = "text/plain; version=0.0.4")))]
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(state.shop.render_metrics())
}
