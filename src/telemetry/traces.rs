//! Traces: OpenTelemetry spans exported over OTLP (HTTP/protobuf), off unless an OTLP endpoint
//! is configured with the standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_SDK_DISABLED=true` turns them off again).
//! `OTEL_SERVICE_NAME` names the service (default `seckill`), `OTEL_TRACES_SAMPLER` and
//! `OTEL_TRACES_SAMPLER_ARG` choose the sampler (default: parent-based, always on), and
//! `OTEL_BSP_*` tune the batch exporter; the SDK reads them all.
//!
//! One purchase is one trace: the request span (continuing an incoming W3C `traceparent`), the
//! Redis call with its outcome, and, through the `traceparent` the purchase writes into its
//! stream entry, the worker's batch span linked to it with the Postgres insert inside. Off, the
//! spans of this module are not created ([`on`] is checked first), the entry carries no
//! `traceparent` and no layer is installed: the purchase path does the work it did without.

use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Whether traces are exported, decided once by [`start`].
static ON: OnceLock<bool> = OnceLock::new();

/// Whether this process exports traces: the spans of the purchase path are made only then.
pub fn on() -> bool {
    *ON.get_or_init(|| false)
}

/// Whether the environment asks for traces: an OTLP endpoint, and the SDK not disabled.
pub fn wanted() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The exporting provider when [`wanted`] (and then [`on`] is true from here on); `None` off.
/// Keep it until exit and [`SdkTracerProvider::shutdown`] it: that flushes the last spans.
pub fn start() -> anyhow::Result<Option<SdkTracerProvider>> {
    if !wanted() {
        let _ = ON.set(false);
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()?;
    let mut resource = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name("seckill");
    }
    let resource = resource.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let _ = ON.set(true);
    Ok(Some(provider))
}

/// The tracer the `tracing` layer writes spans with.
pub fn tracer(provider: &SdkTracerProvider) -> opentelemetry_sdk::trace::Tracer {
    provider.tracer("seckill")
}

/// Makes `span` continue the trace of an incoming W3C `traceparent` (and `tracestate`).
pub fn continue_from(span: &Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    let Some(traceparent) = traceparent else { return };
    let mut carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_string(), state.to_string());
    }
    let parent = TraceContextPropagator::new().extract(&carrier);
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// The W3C `traceparent` of `span`, to carry its trace across the order stream; `None` when
/// traces are off or the span is not sampled.
pub fn traceparent(span: &Span) -> Option<String> {
    if !on() {
        return None;
    }
    let context = span.context();
    if !context.span().span_context().is_sampled() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove("traceparent")
}

/// Links `span` to the span a `traceparent` names (a purchase whose order this batch writes).
pub fn link(span: &Span, traceparent: &str) {
    let carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let cx: Context = TraceContextPropagator::new().extract(&carrier);
    let linked = cx.span().span_context().clone();
    if linked.is_valid() {
        span.add_link(linked);
    }
}
