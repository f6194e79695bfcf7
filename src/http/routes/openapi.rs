//! The OpenAPI 3 description of the HTTP API, generated from the handlers' annotations
//! (`utoipa`), served at `GET /openapi.json`.

use std::sync::OnceLock;

use actix_web::http::header::ContentType;
use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{
    admin, admin_page, buy, buyer_page, challenge, controls, draw_entries, draw_run, drop_page, drops, events, exports,
    favicon, health, order, order_actions, payments, queue, reconcile, retire, sales, seed, webhooks,
};
use crate::http::AppState;

#[derive(OpenApi)]
#[openapi(
    info(title = "seckill", description = "Flash-sale purchase service: each user buys at most once, never more than \
        the stock."),
    paths(
        buy::buy,
        sales::sale,
        order::order,
        order::cancel,
        queue::join,
        queue::standing,
        challenge::challenge,
        queue::drop_join,
        queue::drop_standing,
        challenge::drop_challenge,
        draw_entries::enter,
        draw_entries::entry,
        draw_run::record,
        challenge::worker,
        payments::event,
        buyer_page::home,
        buyer_page::sale,
        admin_page::page,
        favicon::icon,
        admin::me,
        admin::list,
        seed::seed,
        admin::status,
        payments::late_payments,
        order_actions::cancel,
        order_actions::refund,
        events::list,
        events::retry,
        webhooks::list,
        webhooks::register,
        webhooks::remove,
        webhooks::enable,
        retire::retire,
        controls::pause,
        controls::resume,
        controls::end,
        controls::stock,
        controls::audit,
        drops::public,
        drop_page::page,
        drops::seed,
        drops::status,
        drops::pause,
        drops::resume,
        drops::end,
        drops::stock,
        draw_run::run,
        draw_run::stats,
        drops::audit,
        exports::sale_orders,
        exports::drop_orders,
        reconcile::reconcile_check,
        reconcile::reconcile_repair,
        health::healthz,
        health::readyz,
        super::metrics,
        openapi_json,
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "purchase", description = "Buying"),
        (name = "waiting room", description = "A queued sale's line: join before the start, poll your place, buy once \
            admitted"),
        (name = "draw", description = "A drop in draw mode: enter once while entries are open, read your entry"),
        (name = "payments", description = "The shop's payment system: signed payment events that settle reservations"),
        (name = "buyer", description = "The buyer page: countdown, stock, Buy, the order's status"),
        (name = "admin", description = "Seeding, inspecting, pausing, restocking and retiring sales, their audit \
            trail, cancelling and refunding orders, the order exports, the order events and their webhook endpoints \
            (bearer: an operator's token, or a viewer's for reads), and the live sale page"),
        (name = "health", description = "Liveness, readiness, metrics and this document"),
    )
)]
pub struct ApiDoc;

/// The `bearer` security scheme the admin routes require, and `bearer_jwt`, the buyer's token
/// that `POST /buy` requires under `SECKILL_AUTH=jwt`.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "bearer_jwt",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "The buyer's token (SECKILL_AUTH=jwt): its `sub` (or configured claim) is the buyer",
                    ))
                    .build(),
            ),
        );
    }
}

/// `GET /openapi.json`: this document, for this service's `SECKILL_AUTH`: with `none` the body's
/// (and the order routes' query's) `user_id` names the buyer, so the document requires it; with `jwt` it
/// is optional. Built once per process and form (it is ~60 KB of JSON, which any client may ask for).
#[utoipa::path(get, path = "/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
pub async fn openapi_json(state: web::Data<AppState>) -> HttpResponse {
    static DOCUMENTS: OnceLock<[Bytes; 2]> = OnceLock::new();
    let [with_jwt, without] = DOCUMENTS.get_or_init(|| [document(false), document(true)]);
    let body = if state.verifier.is_none() { without } else { with_jwt };
    HttpResponse::Ok().content_type(ContentType::json()).body(body.clone())
}

/// The document, with `user_id` required where the body or query names the buyer.
fn document(user_id_required: bool) -> Bytes {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    for body in ["BuyRequest", "EntryRequest"] {
        if user_id_required && let Some(required) = doc["components"]["schemas"][body]["required"].as_array_mut() {
            required.push("user_id".into());
        }
    }
    for (path, method) in
        [("/sales/{sale_id}/order", "get"), ("/sales/{sale_id}/order", "delete"), ("/drops/{drop_id}/entry", "get")]
    {
        if user_id_required && let Some(params) = doc["paths"][path][method]["parameters"].as_array_mut() {
            params.iter_mut().filter(|p| p["name"] == "user_id").for_each(|p| p["required"] = true.into());
        }
    }
    Bytes::from(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::document;

    /// `docs/openapi.json` (the document as served with `SECKILL_AUTH=jwt`), kept equal to the
    /// served one so a refactor of the handlers' annotations cannot change the API unnoticed.
    /// After a deliberate change: `SECKILL_WRITE_OPENAPI=1 cargo test --lib openapi` rewrites it.
    #[test]
    fn the_committed_document_is_the_served_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
        let served: serde_json::Value = serde_json::from_slice(&document(false)).unwrap();
        if std::env::var_os("SECKILL_WRITE_OPENAPI").is_some() {
            std::fs::write(path, serde_json::to_string_pretty(&served).unwrap() + "\n").unwrap();
        }
        let committed: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(committed == served, "docs/openapi.json is not the served document: rewrite it (see above)");
    }
}
