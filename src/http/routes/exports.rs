//! The order exports: `GET /admin/sales/{sale_id}/orders` and `GET /admin/drops/{drop_id}/orders`,
//! as CSV or NDJSON (`?format=` or `Accept`), optionally of some statuses (`?status=paid,reserved`),
//! streamed: a page of orders at a time, whatever their number. A viewer may export.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use futures::TryStreamExt;
use serde::Deserialize;
use utoipa::IntoParams;

use super::admin::{AdminErrors, SalePath};
use super::sale_of;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::Viewer;
use crate::shop::{ExportFormat, ExportLines};
use crate::telemetry::request_lines;

/// An export's query. A parameter it does not know is 400: a misspelt filter (`?state=paid`)
/// must not export every order as if it were the filtered list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// `csv` or `ndjson`; unset: the `Accept` header's (`text/csv`, `application/x-ndjson`), else CSV.
    #[param(pattern = "^(csv|ndjson)$")]
    format: Option<String>,
    /// Only the orders of these statuses, comma-separated (`confirmed`, `reserved`, `paid`,
    /// `cancelled`, `expired`, `refunded`); unset or empty: every order.
    #[param(pattern = "^((confirmed|reserved|paid|cancelled|expired|refunded)\
                       (,(confirmed|reserved|paid|cancelled|expired|refunded))*)?$")]
    status: Option<String>,
}

/// The `{drop_id}` of a drop's route.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct DropPath {
    /// 1-64 characters of `[A-Za-z0-9_-]`: the sales `<drop_id>.<size>`.
    #[param(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$")]
    drop_id: String,
}

/// The sale's orders, one line each (CSV with a header line, or NDJSON), in the order of their
/// buyers' ids. Columns: order_id, sale_id, user_id, quantity, status, created_at, persisted_at,
/// pay_by, resolved_at, resolved_by, restocked_at (instants RFC 3339 in UTC; empty or `null`:
/// none). A retired sale's orders too. Should Postgres fail mid-way, the answer is cut short (its
/// chunked body never ends properly), never silently incomplete.
#[utoipa::path(
    get,
    path = "/admin/sales/{sale_id}/orders",
    tag = "admin",
    params(SalePath, ExportQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The orders", content(
            (String = "text/csv"),
            (String = "application/x-ndjson"),
        )),
        (status = 404, description = "`unknown_sale`", body = ErrorBody),
        (status = 429, description = "`too_many_exports`: this instance streams 4 exports already (`Retry-After`)",
            body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn sale_orders(
    _viewer: Viewer,
    req: HttpRequest,
    path: web::Path<String>,
    query: web::Query<ExportQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_of(&path)?;
    let (format, statuses) = choices(&req, &query)?;
    let lines = state.shop.export_sale(&sale, statuses, format).await?;
    Ok(answer(&req, lines, format, sale.as_str()))
}

/// The orders of every sale of the drop (`<drop_id>.<size>`), sale after sale by id, as
/// `GET /admin/sales/{sale_id}/orders` writes them.
#[utoipa::path(
    get,
    path = "/admin/drops/{drop_id}/orders",
    tag = "admin",
    params(DropPath, ExportQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The orders", content(
            (String = "text/csv"),
            (String = "application/x-ndjson"),
        )),
        (status = 404, description = "`unknown_drop`: no sale `<drop_id>.<size>`", body = ErrorBody),
        (status = 429, description = "`too_many_exports`: this instance streams 4 exports already (`Retry-After`)",
            body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn drop_orders(
    _viewer: Viewer,
    req: HttpRequest,
    path: web::Path<String>,
    query: web::Query<ExportQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let (format, statuses) = choices(&req, &query)?;
    let lines = state.shop.export_drop(&path, statuses, format).await?;
    Ok(answer(&req, lines, format, &path))
}

/// The format (the query's, else the `Accept` header's, else CSV) and the statuses asked.
fn choices(req: &HttpRequest, query: &ExportQuery) -> Result<(ExportFormat, Vec<String>), ApiError> {
    let format = match query.format.as_deref() {
        Some(raw) => ExportFormat::parse(raw)
            .ok_or_else(|| ApiError::InvalidRequest(format!("format {raw:?} is neither csv nor ndjson")))?,
        None => {
            let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
            if accept.contains("application/x-ndjson") { ExportFormat::Ndjson } else { ExportFormat::Csv }
        }
    };
    // Unset or empty: every order; otherwise each comma-separated name exactly (the use case
    // refuses an unknown or empty one, as the document's pattern does).
    let statuses = match query.status.as_deref() {
        None | Some("") => vec![],
        Some(names) => names.split(',').map(str::to_owned).collect(),
    };
    Ok((format, statuses))
}

fn answer(req: &HttpRequest, lines: ExportLines, format: ExportFormat, name: &str) -> HttpResponse {
    // The body streams after the handler has returned, outside the request's scope: its line
    // is logged in it again, so that it carries the request's id.
    let request = request_lines::current();
    let body = lines.map_ok(web::Bytes::from).map_err(move |err| {
        let log = || tracing::error!(error = %err, "an order export failed mid-way; its answer is cut short");
        match request {
            Some(id) => request_lines::sync_scope(id, log),
            None => log(),
        }
        actix_web::error::ErrorServiceUnavailable("export failed")
    });
    let mut head = HttpResponse::Ok();
    head.content_type(format.content_type()).insert_header((header::CACHE_CONTROL, "no-store")).insert_header((
        header::CONTENT_DISPOSITION,
        format!("attachment; filename=\"{name}-orders.{}\"", format.extension()),
    ));
    super::streamed(req, head, body)
}
