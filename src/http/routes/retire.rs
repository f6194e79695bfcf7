//! `DELETE /admin/sales/{sale_id}`: retires a sale (admin bearer token, as every admin route).

use actix_web::{HttpResponse, web};

use super::admin::{AdminErrors, SalePath};
use super::sale_of;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::Operator;
use crate::http::views::RetireReport;

/// Retires the sale (`crate::retire`): once it has ended or sold out, its queue has drained and it
/// reconciles, its Redis keys and registrations go; Postgres keeps its orders and its row, marked
/// retired. Takes about a second (the workers' grace) plus the removal, in steps.
#[utoipa::path(
    delete,
    path = "/admin/sales/{sale_id}",
    tag = "admin",
    params(SalePath),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Retired; what was removed", body = RetireReport),
        (status = 404, description = "`unknown_sale`: Redis does not know the sale (never seeded, or lost: repair it \
            first)", body = ErrorBody),
        (status = 409, description = "`not_retirable`: `reasons` lists why (`open`, `queued`, `pending`, \
            `stock_unbalanced`, `missing_in_postgres`, `unknown_to_redis`, `sales_row`, `reserved`, `draw_pending`); \
            nothing changed, unless orders were found queued only after the sale was ended (it stays ended)",
            body = ErrorBody),
        (status = 410, description = "`sale_retired`: retired before", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn retire(
    operator: Operator,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(RetireReport::from(state.shop.retire(&sale_of(&path)?, operator.actor()).await?)))
}
