//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info,sqlx=warn`), as text
//! (coloured only when stderr is a terminal) or as one JSON object per line; and, when an OTLP
//! endpoint is configured, traces ([`traces`]).
//!
//! Every line an HTTP request logs carries its `request_id`, which text lines show in their span
//! prefix and JSON lines in their `span` object: a `request` span made for the line
//! ([`request_lines`]), or with traces on the request's own span; the id is also sent back in the
//! `x-request-id` header (`crate::http::middleware`). Nothing is logged per successful request at the default level,
//! and what a client can make the HTTP stack log (a malformed request) is a WARN line at most once
//! a second. Requests failing on Redis or Postgres log a WARN line at most once every
//! [`DEPENDENCY_WARN_INTERVAL`] per dependency ([`dependency_failure_line`]), so an outage under a
//! crowd logs a few lines, not one per request.

pub mod request_lines;
pub mod traces;

use std::io::IsTerminal;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// How log lines are written (`SECKILL_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, with the fields of the current span (request_id, ...).
    Json,
}

/// What [`init`] set up; dropping it exports the traces still buffered (call it outside the
/// async runtime: the exporter blocks).
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.traces.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("seckill: exporting the last traces failed: {err}");
        }
    }
}

/// Installs the global subscriber (once; later calls are ignored, which tests rely on): the log
/// lines, filtered by `RUST_LOG`, with the HTTP stack's own connection errors through
/// [`ConnectionErrors`]; with traces wanted ([`traces::wanted`]) also the OpenTelemetry layer,
/// which sees seckill's own spans at INFO whatever `RUST_LOG` says (the log filter then applies
/// to the lines only). Call it before the async runtime starts.
pub fn init(format: LogFormat) -> Telemetry {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => lines.with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => lines.json().with_current_span(true).with_span_list(false).boxed(),
    };
    let provider = match traces::start() {
        Ok(provider) => provider,
        Err(err) => {
            eprintln!("seckill: traces are off: the OTLP exporter could not be built: {err}");
            None
        }
    };
    let Some(provider) = provider else {
        let subscriber = tracing_subscriber::registry()
            .with(lines)
            .with(ConnectionErrors::new())
            .with(request_lines::RequestLines)
            .with(filter);
        let _ = tracing::subscriber::set_global_default(subscriber);
        return Telemetry { traces: None };
    };
    let spans = tracing_opentelemetry::layer()
        .with_tracer(traces::tracer(&provider))
        .with_filter(Targets::new().with_target("seckill", Level::INFO));
    let subscriber =
        tracing_subscriber::registry().with(lines.with_filter(filter)).with(spans).with(ConnectionErrors::new());
    let _ = tracing::subscriber::set_global_default(subscriber);
    Telemetry { traces: Some(provider) }
}

/// At most one line per period for one kind of event: the lines held back are counted, and the
/// count goes with the next line logged.
pub struct LimitedLines {
    lines: DefaultDirectRateLimiter,
    suppressed: AtomicU64,
}

impl LimitedLines {
    /// At most one line every `period` (above zero), the first at once.
    pub fn every(period: Duration) -> Self {
        let quota = Quota::with_period(period).expect("a period above zero");
        Self { lines: RateLimiter::direct(quota), suppressed: AtomicU64::new(0) }
    }

    /// `Some(n)` if a line may be logged now, `n` the lines held back since the previous one;
    /// `None` (and counted) if not.
    pub fn admit(&self) -> Option<u64> {
        if self.lines.check().is_err() {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

/// The most connection errors logged: one a second; the rest are counted, and the count goes
/// with the next line logged.
const CONNECTION_ERROR_PERIOD: Duration = Duration::from_secs(1);

/// How often requests failing on one dependency log: the first failure at once, then at most one
/// line per dependency in this time, which carries how many failures were not logged before it.
pub const DEPENDENCY_WARN_INTERVAL: Duration = Duration::from_secs(5);

/// The most internal errors logged: one a second; the rest are counted, and the count goes with
/// the next line logged.
const INTERNAL_ERROR_PERIOD: Duration = Duration::from_secs(1);

/// Whether a request that failed on an internal error (a bug, or a reply no path expects) logs
/// its ERROR line now: `Some(n)`, `n` the internal errors held back since the previous line;
/// `None` (counted) to hold this one back ([`INTERNAL_ERROR_PERIOD`]), so that a client that
/// can cause one at will cannot flood the log.
pub fn internal_error_line() -> Option<u64> {
    static LINES: LazyLock<LimitedLines> = LazyLock::new(|| LimitedLines::every(INTERNAL_ERROR_PERIOD));
    LINES.admit()
}

/// Whether a request that failed on `dependency` (`"redis"`, `"postgres"`; `None`: neither, or
/// not known) logs its WARN line now: `Some(n)`, `n` the failures of that dependency held back
/// since its previous line; `None` (counted) to hold this one back. One budget per dependency
/// and process ([`DEPENDENCY_WARN_INTERVAL`]).
pub fn dependency_failure_line(dependency: Option<&str>) -> Option<u64> {
    static LINES: LazyLock<[LimitedLines; 3]> =
        LazyLock::new(|| std::array::from_fn(|_| LimitedLines::every(DEPENDENCY_WARN_INTERVAL)));
    let budget = match dependency {
        Some("redis") => 0,
        Some("postgres") => 1,
        _ => 2,
    };
    LINES[budget].admit()
}

/// actix-http's warnings and errors: each is about one connection (a malformed request, a client
/// gone mid-request), which any client can cause at will.
fn is_connection_error(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() <= Level::WARN && meta.target().starts_with("actix_http")
}

/// Logs actix-http's connection errors as WARN lines of `seckill::http` instead, at most one
/// per [`CONNECTION_ERROR_PERIOD`], so a flood of bad requests cannot flood the log (actix-http
/// logs each at ERROR). It looks at events only (`event_enabled`, which disables the original
/// for every layer), never at spans: the request span costs nothing more.
struct ConnectionErrors {
    lines: LimitedLines,
}

impl ConnectionErrors {
    fn new() -> Self {
        Self { lines: LimitedLines::every(CONNECTION_ERROR_PERIOD) }
    }
}

impl<S: tracing::Subscriber> Layer<S> for ConnectionErrors {
    fn event_enabled(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) -> bool {
        if !is_connection_error(event.metadata()) {
            return true;
        }
        let Some(suppressed) = self.lines.admit() else {
            return false;
        };
        let mut message = Message(String::new());
        event.record(&mut message);
        tracing::warn!(target: "seckill::http", suppressed, "client connection: {}", message.0);
        false
    }
}

/// An event's `message` field.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}
