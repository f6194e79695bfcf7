//! Every route, registered by [`configure`]: one file per resource (`buy`, `sales`, `admin`, `retire`,
//! `admin_page`, `buyer_page`, `health`, `openapi`; `limits` is what `buy` and `sales` share,
//! `page` what the two HTML pages share), and here the routing itself, 404/405 and `GET /metrics`.

mod admin;
mod admin_page;
mod buy;
mod buyer_page;
mod health;
mod limits;
mod openapi;
mod page;
mod reconcile;
mod retire;
mod sales;

use actix_web::{HttpRequest, HttpResponse, web};

use super::AppState;
use super::error::ApiError;

pub use admin::{SaleStatus, SalesOverview};
pub use openapi::ApiDoc;

/// Largest request body accepted; larger ones answer 413.
pub const MAX_BODY_BYTES: usize = 4 * 1024;

/// Registers every route on an actix `App`.
pub fn configure(state: AppState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        let json = web::JsonConfig::default()
            .limit(MAX_BODY_BYTES)
            .content_type_required(true)
            .error_handler(|err, _req| ApiError::from(err).into());
        let path =
            web::PathConfig::default().error_handler(|err, _req| ApiError::InvalidRequest(err.to_string()).into());
        let query =
            web::QueryConfig::default().error_handler(|err, _req| ApiError::InvalidRequest(err.to_string()).into());
        cfg.app_data(web::Data::new(state))
            .app_data(json)
            .app_data(path)
            .app_data(query)
            .service(web::resource("/metrics").route(web::get().to(metrics)).default_service(allow("GET")))
            .service(
                web::resource("/openapi.json")
                    .route(web::get().to(openapi::openapi_json))
                    .default_service(allow("GET")),
            )
            .service(web::resource("/buy").route(web::post().to(buy::buy)).default_service(allow("POST")))
            .service(web::resource("/sales/{sale_id}").route(web::get().to(sales::sale)).default_service(allow("GET")))
            .service(
                web::resource("/sales/{sale_id}/order")
                    .route(web::get().to(sales::order))
                    .default_service(allow("GET")),
            )
            .service(web::resource("/").route(web::get().to(buyer_page::home)).default_service(allow("GET")))
            .service(
                web::resource("/sale/{sale_id}").route(web::get().to(buyer_page::sale)).default_service(allow("GET")),
            )
            .service(web::resource("/admin").route(web::get().to(admin_page::page)).default_service(allow("GET")))
            .service(web::resource("/admin/sales").route(web::get().to(admin::list)).default_service(allow("GET")))
            .service(
                web::resource("/admin/sales/{sale_id}")
                    .route(web::put().to(admin::seed))
                    .route(web::get().to(admin::status))
                    .route(web::delete().to(retire::retire))
                    .default_service(allow("DELETE, GET, PUT")),
            )
            .service(
                web::resource("/admin/sales/{sale_id}/reconcile")
                    .route(web::get().to(reconcile::reconcile_check))
                    .route(web::post().to(reconcile::reconcile_repair))
                    .default_service(allow("GET, POST")),
            )
            .service(web::resource("/healthz").route(web::get().to(health::healthz)).default_service(allow("GET")))
            .service(web::resource("/readyz").route(web::get().to(health::readyz)).default_service(allow("GET")))
            .default_service(web::to(not_found));
    }
}

async fn not_found(_req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}

/// A resource's answer to any other method: 405 with `Allow: <methods>` (RFC 9110).
fn allow(methods: &'static str) -> actix_web::Route {
    web::to(move || async move { Err::<HttpResponse, _>(ApiError::MethodNotAllowed { allow: methods }) })
}

/// `GET /metrics`: Prometheus text exposition of this process's metrics.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text exposition", content_type = "text/plain; version=0.0.4")))]
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(state.metrics.render())
}
