//! Logging on stderr through `tracing`: text for people, or one JSON
//! object per line (`--log-format json`) for log pipelines.
//!
//! The JSON lines are written by a small event formatter here rather than
//! tracing-subscriber's `json` feature, which would add crates to the
//! build for the same few keys: `timestamp` (RFC 3339, UTC), `level`,
//! `target`, `message`, every field of the event by its name, and
//! `spans` (the names of the spans it happened in, outermost first).

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::args::LogFormat;
use crate::clock::{Clock, SystemClock};

/// Keys the formatter writes itself; a field of the same name is written
/// as `field.<name>`.
const RESERVED: &[&str] = &["timestamp", "level", "target", "spans"];

/// Formats each event as one JSON object on a line.
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonLines;

struct Fields<'a>(&'a mut Map<String, Value>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        let name = field.name();
        let key = if RESERVED.contains(&name) {
            format!("field.{name}")
        } else {
            name.to_string()
        };
        self.0.insert(key, value);
    }
}

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::from(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::from(format!("{value:?}")));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut out = Map::new();
        out.insert(
            "timestamp".into(),
            Value::from(crate::clock::format_rfc3339(SystemClock.now())),
        );
        out.insert("level".into(), Value::from(meta.level().as_str()));
        out.insert("target".into(), Value::from(meta.target()));
        event.record(&mut Fields(&mut out));
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope.from_root().map(|s| Value::from(s.name())).collect();
            if !spans.is_empty() {
                out.insert("spans".into(), Value::Array(spans));
            }
        }
        writeln!(writer, "{}", Value::Object(out))
    }
}

/// Installs the process's subscriber: `filter` in `EnvFilter` syntax (an
/// invalid filter falls back to `info`, with a warning), in `format`.
pub fn init(filter: &str, format: LogFormat, color: bool) {
    use tracing_subscriber::EnvFilter;
    let (env_filter, bad) = match EnvFilter::try_new(filter) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(color).try_init(),
        LogFormat::Json => builder.with_ansi(false).event_format(JsonLines).try_init(),
    };
    if let Some(error) = bad {
        tracing::warn!(filter, %error, "invalid log filter; logging at info");
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_lines_carry_the_level_message_fields_and_spans() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("reconcile");
            let _g = span.enter();
            tracing::warn!(
                object = "NodeClaim/general-1",
                reason = "LaunchFailed",
                attempts = 3u64,
                level = "shadowed",
                "launch failed: \"quoted\"\nsecond line"
            );
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let v: Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["message"], "launch failed: \"quoted\"\nsecond line");
        assert_eq!(v["object"], "NodeClaim/general-1");
        assert_eq!(v["reason"], "LaunchFailed");
        assert_eq!(v["attempts"], 3);
        assert_eq!(v["field.level"], "shadowed");
        assert_eq!(v["spans"], serde_json::json!(["reconcile"]));
        assert!(v["target"].as_str().unwrap().starts_with("dovetail"));
        assert!(v["timestamp"].as_str().unwrap().ends_with('Z'));
    }
}
