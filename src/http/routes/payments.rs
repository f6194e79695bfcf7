//! `POST /payments/events`: the shop's payment system tells seckill an order is paid. The body
//! is signed (`crate::shop::Shop::verify_payment`); the signature is checked on the raw bytes before
//! anything is parsed. And `GET /admin/late-payments`, the payments to refund (admin token).

use actix_web::http::header::{self, ContentType};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::admin::AdminErrors;
use super::object::Object;
use super::responses::JsonBody;
use super::sale_of;
use super::small_body::read_small;
use crate::domain::Standing;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::Viewer;
use crate::http::views::LatePayment;
use crate::shop::{PaymentOutcome, SIGNATURE_HEADER};

/// The only event type seckill takes.
pub const ORDER_PAID: &str = "order.paid";

/// A payment event, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PaymentEvent {
    /// The event's id, unique per event (1-128 characters, no control characters): the same id
    /// again is answered as the first time and changes nothing.
    #[schema(min_length = 1, max_length = 128, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$")]
    id: String,
    /// `order.paid`.
    #[serde(rename = "type")]
    #[schema(rename = "type", pattern = "^order\\.paid$")]
    kind: String,
    /// The order's sale.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$")]
    sale_id: String,
    /// The order (the `order_id` of its 201).
    order_id: Uuid,
}

/// Where the order stands after the event.
#[derive(Debug, Serialize, ToSchema)]
pub struct PaymentResult {
    pub order_id: Uuid,
    /// `paid`; or, for a late payment, where the order stood (`expired`, `cancelled`).
    #[schema(value_type = String, example = "paid")]
    pub status: Standing,
    /// The payment arrived after the order had expired or been cancelled, or the order was
    /// already paid by another event: it did not pay for the unit, refund it
    /// (`GET /admin/late-payments` lists them).
    pub late_payment: bool,
}

/// Applies a signed payment event. A reservation paid before its deadline becomes `paid`; after
/// it (or after a cancel) the order stays expired or cancelled and the payment is a late one, to
/// refund. An order the worker has not stored yet is taken from the queue first.
#[utoipa::path(
    post,
    path = "/payments/events",
    tag = "payments",
    request_body = PaymentEvent,
    params(("Seckill-Signature" = String, Header, description = "`t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<raw \
        body>\" keyed by SECKILL_PAYMENT_SECRET>`; several `v1=` allowed (secret rotation); 300 s tolerance")),
    responses(
        (status = 200, description = "Applied (or the same event again: the same answer, nothing changed)",
            body = PaymentResult),
        (status = 400, description = "`invalid_request`: not JSON or not an object, missing, extra or mistyped \
            fields, another event type", body = ErrorBody),
        (status = 401, description = "`invalid_signature`: no, a malformed, a stale or a wrong `Seckill-Signature`",
            body = ErrorBody),
        (status = 404, description = "`unknown_order`: no order of the sale with that id (or the sale has no payment \
            window)", body = ErrorBody),
        (status = 409, description = "`event_reused`: the event id was used before for another order",
            body = ErrorBody),
        JsonBody,
        (status = 503, description = "`payments_disabled`: no SECKILL_PAYMENT_SECRET; `unavailable`: Redis or \
            Postgres is unreachable", body = ErrorBody),
    )
)]
pub async fn event(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    state.shop.payments_enabled()?;
    let json = req.mime_type().ok().flatten().is_some_and(|m| m.essence_str() == ContentType::json().0.essence_str());
    if !json {
        return Err(ApiError::UnsupportedMediaType);
    }
    let body = read_small(payload).await?;
    let presented = req.headers().get(SIGNATURE_HEADER).map(|v| v.to_str().unwrap_or_default());
    state.shop.verify_payment(presented, &body)?;
    let Object(event): Object<PaymentEvent> =
        serde_json::from_slice(&body).map_err(|e| ApiError::InvalidRequest(format!("invalid JSON body: {e}")))?;
    if event.kind != ORDER_PAID {
        return Err(ApiError::InvalidRequest(format!("type must be {ORDER_PAID:?}")));
    }
    if event.id.is_empty() || event.id.chars().count() > 128 || event.id.chars().any(char::is_control) {
        return Err(ApiError::InvalidRequest("id must be 1-128 printable characters".into()));
    }
    let settled = state.shop.pay(&event.id, &sale_of(&event.sale_id)?, event.order_id).await?;
    Ok(HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(PaymentResult {
        order_id: settled.order_id,
        status: settled.standing,
        late_payment: settled.outcome != PaymentOutcome::Paid,
    }))
}

/// Which sale's payments to refund.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LatePaymentsQuery {
    /// Only this sale's (1-64 characters of `[A-Za-z0-9_-]`, or `<group>.<name>`); unset: every sale's.
    #[param(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$")]
    sale_id: Option<String>,
}

/// The payments to refund, oldest first (at most 1,000): events that arrived after their order
/// expired or was cancelled (`late`), or paid an order already paid (`duplicate`). Also those of
/// retired sales: a late payment may arrive after the sale is over.
#[utoipa::path(
    get,
    path = "/admin/late-payments",
    tag = "admin",
    params(LatePaymentsQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The payments to refund", body = Vec<LatePayment>),
        AdminErrors,
    )
)]
pub async fn late_payments(
    _viewer: Viewer,
    query: web::Query<LatePaymentsQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = query.into_inner().sale_id.map(|id| sale_of(&id)).transpose()?;
    let listed = state.shop.late_payments(sale.as_ref()).await?;
    Ok(HttpResponse::Ok().json(listed.into_iter().map(LatePayment::from).collect::<Vec<_>>()))
}
