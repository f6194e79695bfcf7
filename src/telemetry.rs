//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info,sqlx=warn`), as text
//! (coloured only when stderr is a terminal) or as one JSON object per line.
//!
//! Every HTTP request runs in a span with a `request_id` (`crate::http::middleware`), which text
//! lines show in their span prefix and JSON lines in their `span` object; the id is also sent back
//! in the `x-request-id` header. Nothing is logged per successful request at the default level.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

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
