//! A request's id on its log lines without a span per request. The HTTP middleware
//! (`crate::http::middleware::request_id`) runs each request with its id in a task-local
//! ([`scope`], [`sync_scope`]). [`RequestLines`] takes an event logged there outside any span
//! and logs it again, with the same metadata and fields, as the child of a `request` span made
//! for it. The lines look as they did when every request had a span: JSON lines carry
//! `"span":{"request_id":…,"name":"request"}`, text lines the prefix `request{request_id=…}:`.
//! A request that logs nothing makes no span: this took about 4 % off the app's CPU per purchase
//! (docs/benchmarks.md). With traces on, each request has its span (the trace's server span),
//! and its lines are in it as before.

use std::future::Future;

use tracing::field::{DisplayValue, Field, Value, Visit, display};
use tracing::span::Id;
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use uuid::Uuid;

tokio::task_local! {
    static REQUEST_ID: Uuid;
}

/// Runs the future `request` with `id` as its log lines' request id.
pub fn scope<F: Future>(id: Uuid, request: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(id, request)
}

/// Runs `f` with `id` as its log lines' request id.
pub fn sync_scope<R>(id: Uuid, f: impl FnOnce() -> R) -> R {
    REQUEST_ID.sync_scope(id, f)
}

/// The id of the request this task serves now, if any.
pub fn current() -> Option<Uuid> {
    REQUEST_ID.try_with(|id| *id).ok()
}

/// The layer that puts a request's id on the lines it logs outside any span (see the module).
/// It logs with the global dispatcher, as `telemetry::init` sets it: a scoped one (tests'
/// `with_default`) refuses what a subscriber logs from inside itself, and the line would be lost.
pub struct RequestLines;

impl<S: Subscriber> Layer<S> for RequestLines {
    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        if !event.is_contextual() || ctx.current_span().id().is_some() {
            return true;
        }
        let Some(id) = current() else {
            return true;
        };
        // The target the request span always had: filters that name it still apply.
        let span = tracing::info_span!(target: "seckill::http::middleware", "request", request_id = %id);
        let mut fields = Recorded(Vec::new());
        event.record(&mut fields);
        // Its parent given, the event comes back through this layer and passes.
        fields.dispatch(span.id(), event);
        false
    }
}

/// The most fields an event has (`tracing`'s macros take at most 32).
const MOST_FIELDS: usize = 32;

/// An event's fields as recorded, to log them again: numbers, booleans and strings as they
/// were, anything else as its `Debug` text (a formatter prints both the same).
struct Recorded(Vec<(Field, Kept)>);

enum Kept {
    I64(i64),
    U64(u64),
    I128(i128),
    U128(u128),
    F64(f64),
    Bool(bool),
    Str(String),
    Text(DisplayValue<String>),
}

impl Kept {
    fn value(&self) -> &dyn Value {
        match self {
            Kept::I64(v) => v,
            Kept::U64(v) => v,
            Kept::I128(v) => v,
            Kept::U128(v) => v,
            Kept::F64(v) => v,
            Kept::Bool(v) => v,
            Kept::Str(v) => v,
            Kept::Text(v) => v,
        }
    }
}

impl Recorded {
    /// Logs `event` again with these fields, as a child of `parent` (none: at the root).
    fn dispatch(&self, parent: Option<Id>, event: &Event<'_>) {
        let metadata = event.metadata();
        let names = metadata.fields();
        let Some(filler) = names.iter().next() else {
            let none: [(&Field, Option<&dyn Value>); 0] = [];
            Event::child_of(parent, metadata, &names.value_set(&none));
            return;
        };
        // A full array: the fields recorded, then the first field again without a value.
        let mut values: [(&Field, Option<&dyn Value>); MOST_FIELDS] = [(&filler, None); MOST_FIELDS];
        for (slot, (field, kept)) in values.iter_mut().zip(&self.0) {
            *slot = (field, Some(kept.value()));
        }
        Event::child_of(parent, metadata, &names.value_set(&values));
    }

    fn keep(&mut self, field: &Field, kept: Kept) {
        self.0.push((field.clone(), kept));
    }
}

impl Visit for Recorded {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.keep(field, Kept::F64(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.keep(field, Kept::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.keep(field, Kept::U64(value));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.keep(field, Kept::I128(value));
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.keep(field, Kept::U128(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.keep(field, Kept::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.keep(field, Kept::Str(value.to_owned()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.keep(field, Kept::Text(display(format!("{value:?}"))));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::Value;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// The JSON and the text lines of this module's tests, written by subscribers like the
    /// service's (JSON with the current span; text), set as the global default as
    /// `telemetry::init` does: a scoped one would refuse the events a subscriber logs itself. No
    /// other test of this binary sets one.
    fn logged(f: impl FnOnce()) -> (Vec<Value>, Vec<String>) {
        static JSON: Mutex<Vec<u8>> = Mutex::new(Vec::new());
        static TEXT: Mutex<Vec<u8>> = Mutex::new(Vec::new());
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            let json = tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(false)
                .with_writer(|| Sink(&JSON));
            let text = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(|| Sink(&TEXT));
            let subscriber = tracing_subscriber::registry().with(json).with(text).with(RequestLines);
            tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber of the lib's tests");
        });
        f();
        let read = |sink: &Mutex<Vec<u8>>| String::from_utf8(sink.lock().unwrap().clone()).unwrap();
        let json = read(&JSON).lines().map(|line| serde_json::from_str::<Value>(line).unwrap()).collect::<Vec<_>>();
        let text = read(&TEXT).lines().filter(|line| line.contains(module_path!())).map(str::to_owned).collect();
        (json.into_iter().filter(|line| line["target"] == module_path!()).collect(), text)
    }

    struct Sink(&'static Mutex<Vec<u8>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_logged_in_a_request_carries_its_id_in_a_request_span_and_keeps_its_fields() {
        let id = Uuid::new_v4();
        let (lines, text) = logged(|| {
            tracing::warn!(before = 1, "outside any request");
            sync_scope(id, || {
                let (count, delta, ratio, shown) = (3_u64, -2_i64, 0.5, "x y");
                tracing::warn!(count, delta, ratio, ok = true, name = "ann", %shown, "a {} line", "x");
                let span = tracing::info_span!("inner");
                span.in_scope(|| tracing::warn!("in a span of its own"));
            });
        });
        assert_eq!(lines.len(), 3, "each event once: {lines:?}");
        assert!(lines[0].get("span").is_none(), "{}", lines[0]);
        assert_eq!(lines[0]["fields"]["before"], 1);

        let line = &lines[1];
        assert_eq!(line["span"]["request_id"], id.to_string(), "{line}");
        assert_eq!(line["span"]["name"], "request");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["target"], module_path!());
        let fields = &line["fields"];
        assert_eq!(fields["message"], "a x line");
        assert_eq!((fields["count"].as_u64(), fields["delta"].as_i64()), (Some(3), Some(-2)));
        assert_eq!((fields["ratio"].as_f64(), fields["ok"].as_bool()), (Some(0.5), Some(true)));
        assert_eq!((fields["name"].as_str(), fields["shown"].as_str()), (Some("ann"), Some("x y")));

        // An event already in a span is left as it is.
        assert_eq!(lines[2]["span"]["name"], "inner", "{}", lines[2]);

        // Text lines: the span's prefix, the fields as written.
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(!text[0].contains("request{"), "{}", text[0]);
        let prefix = format!(" request{{request_id={id}}}: {}: a x line count=3 delta=-2", module_path!());
        assert!(text[1].contains(&prefix), "{}", text[1]);
        assert!(text[1].ends_with(r#"name="ann" shown=x y"#), "{}", text[1]);
    }
}
