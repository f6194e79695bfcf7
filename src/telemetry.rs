//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), coloured only when
//! stderr is a terminal.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (once; later calls are ignored, which tests rely on).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
