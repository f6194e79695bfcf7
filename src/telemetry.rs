//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info,sqlx=warn`), as text
//! (coloured only when stderr is a terminal) or as one JSON object per line.
//!
//! Every HTTP request runs in a span with a `request_id` (`tracing_actix_web`), which text lines
//! show in their span prefix and JSON lines in their `span` object; the id is also sent back in
//! the `x-request-id` header. Nothing is logged per successful request at the default level.

use std::io::IsTerminal;

use actix_web::HttpMessage;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use tracing::Span;
use tracing_actix_web::{RequestId, RootSpanBuilder};
use tracing_subscriber::EnvFilter;

/// The response header carrying the request's id, as its log lines do.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// How log lines are written (`SECKILL_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, with the fields of the current span (request_id, ...).
    Json,
}

/// Installs the global subscriber (once; later calls are ignored, which tests rely on).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
}

/// Middleware (`App::wrap_fn`, inside `TracingLogger`): copies the request id into the response.
pub fn send_request_id<S>(
    req: ServiceRequest,
    service: &S,
) -> impl Future<Output = Result<ServiceResponse, actix_web::Error>> + use<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse, Error = actix_web::Error>,
{
    let id = req.extensions().get::<RequestId>().copied();
    let response = service.call(req);
    async move {
        let mut response = response.await?;
        if let Some(id) = id.and_then(|id| HeaderValue::from_str(&id.to_string()).ok()) {
            response.headers_mut().insert(REQUEST_ID_HEADER, id);
        }
        Ok(response)
    }
}

/// The span of one request: just its id. The crate's default span records a dozen HTTP fields
/// per request, which cost about a fifth of the throughput of the fastest paths (`/healthz`,
/// sold out) in an A/B with wrk; the method and path are in the access pattern anyway.
pub struct RequestSpan;

impl RootSpanBuilder for RequestSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        let id = request.extensions().get::<RequestId>().copied();
        tracing::info_span!("request", request_id = id.map(tracing::field::display))
    }

    fn on_request_end<B: MessageBody>(_span: Span, _outcome: &Result<ServiceResponse<B>, actix_web::Error>) {}
}
