//! Middleware around every route: the request's id (answered in `x-request-id`, on its log
//! lines), its span when traces are on (`tracing_actix_web`), the request metrics, and the close
//! of a connection after a large answer.

use std::time::Instant;

use actix_web::HttpMessage;
use actix_web::body::{BodySize, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::ConnectionType;
use actix_web::http::Method;
use actix_web::http::header::{HeaderName, HeaderValue};
use tracing::Span;
use tracing_actix_web::{RequestId, RootSpanBuilder};
use uuid::Uuid;

use super::AppState;
use super::error::ApiError;
use crate::telemetry::{request_lines, traces};

/// The response header carrying the request's id, as its log lines do.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Middleware (`App::wrap_fn`, inside `TracingLogger` when traces are on): each request's id,
/// answered in `x-request-id` and carried to the request's log lines. With traces on it is
/// tracing-actix-web's, recorded on the request's span; otherwise there is no span per request
/// (about 4 % of a purchase's app CPU): the id is made here and the request runs in its scope
/// ([`request_lines`]), which puts it on any line the request logs.
pub fn request_id<S>(
    req: ServiceRequest,
    service: &S,
) -> impl Future<Output = Result<ServiceResponse, actix_web::Error>> + use<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse, Error = actix_web::Error>,
{
    let id = req.extensions().get::<RequestId>().map_or_else(Uuid::new_v4, |id| Uuid::from(*id));
    let response = request_lines::sync_scope(id, || service.call(req));
    request_lines::scope(id, async move {
        let mut response = response.await?;
        let mut text = Uuid::encode_buffer();
        if let Ok(value) = HeaderValue::from_str(id.hyphenated().encode_lower(&mut text)) {
            response.headers_mut().insert(REQUEST_ID_HEADER, value);
        }
        Ok(response)
    })
}

/// The span of one request when traces are on (`crate::telemetry::traces`; without traces a
/// request has none, see [`request_id`]): the trace's server span, named by the method and the
/// route's pattern, with the request's id and the response status, continuing an incoming W3C
/// `traceparent`. The crate's default span records a dozen HTTP fields per request, which cost
/// about a fifth of the throughput of the fastest paths (`/healthz`, sold out) in an A/B with wrk.
pub struct RequestSpan;

impl RootSpanBuilder for RequestSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        let id = request.extensions().get::<RequestId>().copied();
        let method = method_label(request.method());
        let route = request.match_pattern().unwrap_or_else(|| "unmatched".to_owned());
        let span = tracing::info_span!(
            "request",
            request_id = id.map(tracing::field::display),
            otel.name = format!("{method} {route}"),
            otel.kind = "server",
            http.request.method = method,
            http.route = route,
            http.response.status_code = tracing::field::Empty,
        );
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
        traces::continue_from(&span, header("traceparent"), header("tracestate"));
        span
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, actix_web::Error>) {
        let status = match outcome {
            Ok(response) => response.status().as_u16(),
            Err(err) => err.as_response_error().status_code().as_u16(),
        };
        span.record("http.response.status_code", status);
    }
}

/// The `method` label: a standard method by its name, any other as `_OTHER`, so a client
/// cannot add series by inventing methods. (The `route` label is bounded already: a route's
/// pattern, or `unmatched`; the `status` label by the status codes.)
fn method_label(method: &Method) -> &'static str {
    const STANDARD: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];
    STANDARD.into_iter().find(|m| *m == method.as_str()).unwrap_or("_OTHER")
}

/// Middleware (`App::wrap_fn`): counts and times every request by its route pattern, and counts
/// the Redis and Postgres failures behind 5xx answers.
pub fn record_http<S>(
    req: ServiceRequest,
    service: &S,
) -> impl Future<Output = Result<ServiceResponse, actix_web::Error>> + use<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse, Error = actix_web::Error>,
{
    let method = method_label(req.method());
    let metrics = req.app_data::<actix_web::web::Data<AppState>>().map(|s| s.shop.metrics().clone());
    let started = Instant::now();
    let response = service.call(req);
    async move {
        let response = response.await?;
        if let Some(metrics) = metrics {
            // Read after routing: the resource the router chose, found by its index (before it,
            // actix-web would match the path against every resource again).
            let route = response.request().match_pattern().unwrap_or_else(|| "unmatched".to_owned());
            let status = response.status();
            metrics.http_requests.with_label_values(&[&route, method, status.as_str()]).inc();
            metrics.http_duration.with_label_values(&[&route]).observe(started.elapsed().as_secs_f64());
            if let Some(ApiError::Shop(err)) = response.response().error().and_then(|e| e.as_error::<ApiError>())
                && let Some(cause) = err.cause()
            {
                metrics.dependency_error(cause, "http");
            }
        }
        Ok(response)
    }
}

/// Answers over this many bytes, or streamed, close their connection once written.
pub const LARGE_ANSWER_BYTES: u64 = 16 * 1024;

/// Middleware (`App::wrap_fn`): an answer over [`LARGE_ANSWER_BYTES`], or streamed (a draw's
/// record, an export, the live page's events), closes its connection once written. actix-http
/// keeps its write buffer's capacity for a connection's life, so a keep-alive connection that
/// once took the document, a page or a record would hold that much memory while idle; a client
/// holding many would hold many times that (docs/operations.md, "The edge").
pub fn close_after_large_answers<S>(
    req: ServiceRequest,
    service: &S,
) -> impl Future<Output = Result<ServiceResponse, actix_web::Error>> + use<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse, Error = actix_web::Error>,
{
    let response = service.call(req);
    async move {
        let mut response = response.await?;
        let large = match response.response().body().size() {
            BodySize::Sized(bytes) => bytes > LARGE_ANSWER_BYTES,
            BodySize::Stream => true,
            BodySize::None => false,
        };
        if large {
            response.response_mut().head_mut().set_connection_type(ConnectionType::Close);
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_methods_keep_their_names_and_others_share_one_label() {
        assert_eq!(method_label(&Method::POST), "POST");
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        for invented in ["FOO", "BAR", "get", "PROPFIND"] {
            assert_eq!(method_label(&Method::from_bytes(invented.as_bytes()).unwrap()), "_OTHER");
        }
    }
}
