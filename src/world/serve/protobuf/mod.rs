//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`) of
//! the built-in kinds, as the API server reads and writes it: an object is
//! the magic `k8s\0` and a `runtime.Unknown` envelope that names its
//! `apiVersion` and `kind` and holds the kind's message; a watch stream is
//! length-prefixed `WatchEvent` messages whose objects are enveloped.
//!
//! The messages are described by the descriptors of Kubernetes' own
//! `generated.proto` files (`kubernetes.binpb`, written by the testbed's
//! `k8sprotos` from the k8s.io/api and k8s.io/apimachinery modules), and
//! read and written by `prost-reflect`. The served API keeps speaking JSON
//! inside: this module maps a message to the JSON the API server would
//! serve for it and back, with Kubernetes' special types (`Quantity`,
//! `IntOrString`, `Time`, `MicroTime`, `Duration`, `RawExtension`,
//! `FieldsV1`, and the slices wrapped in a message) in their JSON forms.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage,
};
use serde_json::{Map, Value};

/// The media type of the protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// The prefix of every enveloped object.
const MAGIC: &[u8] = b"k8s\0";

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
const WATCH_EVENT: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent";

/// The API groups whose kinds have messages, with their proto packages'
/// directory (`k8s.io.api.<dir>.<version>`).
const GROUPS: &[(&str, &str)] = &[
    ("", "core"),
    ("apps", "apps"),
    ("authentication.k8s.io", "authentication"),
    ("autoscaling", "autoscaling"),
    ("batch", "batch"),
    ("coordination.k8s.io", "coordination"),
    ("policy", "policy"),
    ("storage.k8s.io", "storage"),
];

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    // A test decodes the committed descriptors; they are not input.
    DescriptorPool::decode(include_bytes!("kubernetes.binpb").as_slice())
        .expect("the committed Kubernetes descriptors decode")
});

/// The fields Go writes even when unset (values with `omitempty`, not
/// pointers): their zero means unset, as Go's decoding and JSON read it.
/// `k8sprotos` marks them with the option `dovetail.k8sjson.omit_zero`.
static OMIT_ZERO: LazyLock<HashSet<String>> = LazyLock::new(|| {
    let Some(option) = POOL.get_extension_by_name("dovetail.k8sjson.omit_zero") else {
        return HashSet::new();
    };
    POOL.all_messages()
        .flat_map(|m| m.fields().collect::<Vec<_>>())
        .filter(|fd| fd.options().get_extension(&option).as_bool() == Some(true))
        .map(|fd| fd.full_name().to_string())
        .collect()
});

/// The message of a kind of a built-in group (its own, or one of
/// `meta/v1`'s, such as `Status` and `DeleteOptions`), if it has one.
pub fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if kind.is_empty() || version.is_empty() {
        return None;
    }
    let own = GROUPS
        .iter()
        .find(|(g, _)| *g == group)
        .and_then(|(_, dir)| {
            POOL.get_message_by_name(&format!("k8s.io.api.{dir}.{version}.{kind}"))
        });
    let builtin = group == "meta.k8s.io" || GROUPS.iter().any(|(g, _)| *g == group);
    own.or_else(|| {
        builtin
            .then(|| POOL.get_message_by_name(&format!("{META}.{kind}")))
            .flatten()
    })
}

/// Whether a request or response body of this media type is protobuf.
pub fn is_protobuf(media_type: &str) -> bool {
    media_type
        .split(';')
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case(MEDIA_TYPE))
}

/// Reads an enveloped object as the JSON the API server serves for it.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let raw = body
        .strip_prefix(MAGIC)
        .ok_or("the body does not start with the protobuf encoding's prefix k8s\\0")?;
    let envelope = DynamicMessage::decode(message(UNKNOWN), raw)
        .map_err(|e| format!("the protobuf envelope could not be decoded: {e}"))?;
    let type_meta = match envelope.get_field_by_name("typeMeta").as_deref() {
        Some(prost_reflect::Value::Message(m)) => m.clone(),
        _ => DynamicMessage::new(message("k8s.io.apimachinery.pkg.runtime.TypeMeta")),
    };
    let text = |m: &DynamicMessage, name: &str| {
        m.get_field_by_name(name)
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    };
    let (api_version, kind) = (text(&type_meta, "apiVersion"), text(&type_meta, "kind"));
    let desc = message_for(&api_version, &kind).ok_or_else(|| {
        format!("no protobuf message is known for kind {kind:?} of apiVersion {api_version:?}")
    })?;
    let raw = envelope
        .get_field_by_name("raw")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    let object = DynamicMessage::decode(desc, raw)
        .map_err(|e| format!("the {kind} in the protobuf envelope could not be decoded: {e}"))?;
    let mut json = match to_json(&object) {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    json.insert("apiVersion".into(), api_version.into());
    json.insert("kind".into(), kind.into());
    Ok(Value::Object(json))
}

/// Writes a served object (or list, or `Status`) in the envelope: `None`
/// when its kind has no message (a custom resource), an error when the
/// JSON does not fit the message.
pub fn encode(object: &Value) -> Option<Result<Vec<u8>, String>> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    let desc = message_for(api_version, kind)?;
    Some(from_json(&desc, object).map(|inner| {
        let mut type_meta =
            DynamicMessage::new(message("k8s.io.apimachinery.pkg.runtime.TypeMeta"));
        type_meta.set_field_by_name("apiVersion", text(api_version));
        type_meta.set_field_by_name("kind", text(kind));
        let mut envelope = DynamicMessage::new(message(UNKNOWN));
        envelope.set_field_by_name("typeMeta", prost_reflect::Value::Message(type_meta));
        envelope.set_field_by_name(
            "raw",
            prost_reflect::Value::Bytes(inner.encode_to_vec().into()),
        );
        envelope.set_field_by_name("contentEncoding", text(""));
        envelope.set_field_by_name("contentType", text(""));
        let mut out = MAGIC.to_vec();
        envelope.encode(&mut out).unwrap_or_default();
        out
    }))
}

/// One frame of a protobuf watch stream: the length, then the
/// `WatchEvent` (not enveloped) whose object is enveloped.
pub fn watch_frame(event_type: &str, object: &Value) -> Option<Result<Vec<u8>, String>> {
    Some(encode(object)?.map(|raw| {
        let mut extension =
            DynamicMessage::new(message("k8s.io.apimachinery.pkg.runtime.RawExtension"));
        extension.set_field_by_name("raw", prost_reflect::Value::Bytes(raw.into()));
        let mut event = DynamicMessage::new(message(WATCH_EVENT));
        event.set_field_by_name("type", text(event_type));
        event.set_field_by_name("object", prost_reflect::Value::Message(extension));
        let body = event.encode_to_vec();
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        frame
    }))
}

/// A string field's value.
fn text(s: &str) -> prost_reflect::Value {
    prost_reflect::Value::String(s.to_string())
}

fn message(name: &str) -> MessageDescriptor {
    // The names are of messages of the committed descriptors (a test reads
    // each).
    POOL.get_message_by_name(name)
        .unwrap_or_else(|| panic!("{name} is in the committed descriptors"))
}

/// A message as its JSON: `Null` for a value Go's JSON leaves out (a zero
/// `Time`).
fn to_json(m: &DynamicMessage) -> Value {
    let field = |name: &str| m.get_field_by_name(name);
    let int = |name: &str| field(name).and_then(|v| as_i64(&v)).unwrap_or(0);
    let text = |name: &str| {
        field(name)
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    };
    match m.descriptor().full_name() {
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => Value::String(text("string")),
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
            if int("type") == 1 {
                Value::String(text("strVal"))
            } else {
                Value::from(int("intVal"))
            }
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" => match int("seconds") {
            // Go's Time reads an empty message as the zero time, which its
            // JSON writes as null.
            0 => Value::Null,
            s => time_json(s, None),
        },
        "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => match (int("seconds"), int("nanos")) {
            (0, 0) => Value::Null,
            (s, n) => time_json(s, Some(n)),
        },
        "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => {
            Value::String(go_duration(int("duration")))
        }
        "k8s.io.apimachinery.pkg.runtime.RawExtension"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1" => {
            let raw = field("raw")
                .or_else(|| field("Raw"))
                .and_then(|v| v.as_bytes().cloned())
                .unwrap_or_default();
            embedded_json(&raw)
        }
        "k8s.io.api.authentication.v1.ExtraValue"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.Verbs" => match field("items").as_deref() {
            Some(prost_reflect::Value::List(items)) => {
                Value::Array(items.iter().map(value_json).collect())
            }
            _ => Value::Array(Vec::new()),
        },
        _ => {
            let mut out = Map::new();
            for (fd, v) in m.fields() {
                if is_zero(v) && OMIT_ZERO.contains(fd.full_name()) {
                    continue;
                }
                match value_json(v) {
                    Value::Null => {}
                    Value::Object(fields) if is_inline(&fd) => out.extend(fields),
                    json => {
                        out.insert(fd.json_name().to_string(), json);
                    }
                }
            }
            Value::Object(out)
        }
    }
}

fn is_zero(v: &prost_reflect::Value) -> bool {
    use prost_reflect::Value as Pb;
    match v {
        Pb::Bool(b) => !b,
        Pb::String(s) => s.is_empty(),
        Pb::Bytes(b) => b.is_empty(),
        Pb::F32(f) => *f == 0.0,
        Pb::F64(f) => *f == 0.0,
        other => as_i64(other) == Some(0),
    }
}

fn value_json(v: &prost_reflect::Value) -> Value {
    use prost_reflect::Value as Pb;
    match v {
        Pb::Bool(b) => Value::Bool(*b),
        Pb::I32(n) => Value::from(*n),
        Pb::I64(n) => Value::from(*n),
        Pb::U32(n) => Value::from(*n),
        Pb::U64(n) => Value::from(*n),
        Pb::F32(f) => {
            serde_json::Number::from_f64(f64::from(*f)).map_or(Value::Null, Value::Number)
        }
        Pb::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Pb::String(s) => Value::String(s.clone()),
        Pb::Bytes(b) => Value::String(BASE64.encode(b)),
        Pb::EnumNumber(n) => Value::from(*n),
        Pb::Message(m) => to_json(m),
        Pb::List(items) => Value::Array(items.iter().map(value_json).collect()),
        Pb::Map(entries) => {
            let mut out = Map::new();
            for (k, v) in entries {
                out.insert(map_key(k), value_json(v));
            }
            Value::Object(out)
        }
    }
}

fn map_key(k: &MapKey) -> String {
    match k {
        MapKey::String(s) => s.clone(),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
    }
}

fn as_i64(v: &prost_reflect::Value) -> Option<i64> {
    use prost_reflect::Value as Pb;
    match v {
        Pb::I32(n) => Some(i64::from(*n)),
        Pb::I64(n) => Some(*n),
        Pb::U32(n) => Some(i64::from(*n)),
        Pb::U64(n) => i64::try_from(*n).ok(),
        _ => None,
    }
}

/// Raw bytes a message embeds: JSON as it was written, or an enveloped
/// protobuf object, decoded.
fn embedded_json(raw: &[u8]) -> Value {
    if raw.is_empty() {
        return Value::Null;
    }
    if raw.starts_with(MAGIC) {
        return decode(raw).unwrap_or(Value::Null);
    }
    serde_json::from_slice(raw).unwrap_or(Value::Null)
}

/// `Time` and `MicroTime` as Go's JSON writes them: RFC 3339 in UTC with
/// whole seconds, and for `MicroTime` (which has `nanos`) six fractional
/// digits.
fn time_json(seconds: i64, nanos: Option<i64>) -> Value {
    let Ok(t) = crate::clock::Timestamp::from_second(seconds) else {
        return Value::Null;
    };
    match nanos {
        None => Value::String(crate::clock::format_rfc3339(t)),
        Some(n) => Value::String(format!(
            "{}.{:06}Z",
            t.strftime("%Y-%m-%dT%H:%M:%S"),
            n.clamp(0, 999_999_999) / 1000
        )),
    }
}

/// A duration as Go's `time.Duration.String` writes it (`1h30m0s`, `1.5s`,
/// `300ms`).
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let fraction = |value: u64, unit: u64| {
        let whole = value / unit;
        let frac = value % unit;
        if frac == 0 {
            whole.to_string()
        } else {
            let digits = unit.ilog10() as usize;
            let f = format!("{frac:0digits$}");
            format!("{whole}.{}", f.trim_end_matches('0'))
        }
    };
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", fraction(n, 1_000));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", fraction(n, 1_000_000));
    }
    let seconds = n / 1_000_000_000;
    let rest = n % 1_000_000_000;
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    let s = fraction(s * 1_000_000_000 + rest, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{sign}{s}s"),
        (0, m) => format!("{sign}{m}m{s}s"),
        (h, m) => format!("{sign}{h}h{m}m{s}s"),
    }
}

/// A message from the JSON the API server serves for it. Fields the
/// message does not have (`apiVersion` and `kind` of the top level and of
/// list items) are left out, as Go's decoding into the type leaves them.
fn from_json(desc: &MessageDescriptor, v: &Value) -> Result<DynamicMessage, String> {
    from_json_at(desc, v, "")
}

fn from_json_at(desc: &MessageDescriptor, v: &Value, path: &str) -> Result<DynamicMessage, String> {
    use prost_reflect::Value as Pb;
    let mut m = DynamicMessage::new(desc.clone());
    let wrong = |expected: &str| format!("{}: expected {expected}, found {v}", display(path));
    match desc.full_name() {
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(wrong("a quantity")),
            };
            m.set_field_by_name("string", Pb::String(s));
        }
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => match v {
            Value::String(s) => {
                m.set_field_by_name("type", Pb::I64(1));
                m.set_field_by_name("strVal", Pb::String(s.clone()));
            }
            Value::Number(n) => {
                let n = n
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| wrong("a 32-bit integer or a string"))?;
                m.set_field_by_name("type", Pb::I64(0));
                m.set_field_by_name("intVal", Pb::I32(n));
            }
            _ => return Err(wrong("an integer or a string")),
        },
        name @ ("k8s.io.apimachinery.pkg.apis.meta.v1.Time"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime") => {
            let s = v.as_str().ok_or_else(|| wrong("an RFC 3339 time"))?;
            let t =
                crate::clock::parse_rfc3339(s).map_err(|e| format!("{}: {e}", display(path)))?;
            m.set_field_by_name("seconds", Pb::I64(t.as_second()));
            if name.ends_with("MicroTime") {
                m.set_field_by_name("nanos", Pb::I32(t.subsec_microsecond() * 1000));
            }
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => {
            let s = v.as_str().ok_or_else(|| wrong("a duration"))?;
            let n = crate::timing::parse_go_duration(s)
                .map_err(|e| format!("{}: {e}", display(path)))?;
            let n = i64::try_from(n)
                .map_err(|_| wrong("a duration that fits 64 bits of nanoseconds"))?;
            m.set_field_by_name("duration", Pb::I64(n));
        }
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => {
            m.set_field_by_name(
                "raw",
                Pb::Bytes(serde_json::to_vec(v).unwrap_or_default().into()),
            );
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1" => {
            m.set_field_by_name(
                "Raw",
                Pb::Bytes(serde_json::to_vec(v).unwrap_or_default().into()),
            );
        }
        "k8s.io.api.authentication.v1.ExtraValue"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.Verbs" => {
            let items = v.as_array().ok_or_else(|| wrong("a list of strings"))?;
            let items = items
                .iter()
                .map(|s| {
                    s.as_str()
                        .map(|s| Pb::String(s.into()))
                        .ok_or_else(|| wrong("a list of strings"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            m.set_field_by_name("items", Pb::List(items));
        }
        _ => {
            let object = v.as_object().ok_or_else(|| wrong("an object"))?;
            // The keys of structs embedded inline, gathered per field.
            let mut inline: Vec<(FieldDescriptor, Map<String, Value>)> = desc
                .fields()
                .filter(is_inline)
                .map(|fd| (fd, Map::new()))
                .collect();
            for (name, value) in object {
                if value.is_null() {
                    continue;
                }
                match desc.get_field_by_json_name(name) {
                    Some(fd) => {
                        let at = if path.is_empty() {
                            name.clone()
                        } else {
                            format!("{path}.{name}")
                        };
                        m.set_field(&fd, field_from_json(&fd, value, &at)?);
                    }
                    None => {
                        if let Some((_, keys)) = inline.iter_mut().find(|(fd, _)| {
                            matches!(fd.kind(), Kind::Message(inner) if has_json_key(&inner, name))
                        }) {
                            keys.insert(name.clone(), value.clone());
                        }
                    }
                }
            }
            for (fd, keys) in inline {
                if let (Kind::Message(inner), false) = (fd.kind(), keys.is_empty()) {
                    let sub = from_json_at(&inner, &Value::Object(keys), path)?;
                    m.set_field(&fd, Pb::Message(sub));
                }
            }
        }
    }
    Ok(m)
}

/// A field that holds a Go struct embedded inline: its fields are its
/// parent's in JSON (`k8sprotos` names it "," and its protobuf name).
fn is_inline(fd: &FieldDescriptor) -> bool {
    fd.json_name().starts_with(',')
}

/// Whether a message's JSON has the key, directly or through a struct
/// embedded inline.
fn has_json_key(desc: &MessageDescriptor, key: &str) -> bool {
    desc.get_field_by_json_name(key).is_some()
        || desc
            .fields()
            .filter(is_inline)
            .any(|fd| matches!(fd.kind(), Kind::Message(inner) if has_json_key(&inner, key)))
}

fn field_from_json(
    fd: &FieldDescriptor,
    v: &Value,
    path: &str,
) -> Result<prost_reflect::Value, String> {
    use prost_reflect::Value as Pb;
    if fd.is_map() {
        let Kind::Message(entry) = fd.kind() else {
            return Err(format!("{path}: a map without an entry message"));
        };
        let value_fd = entry.map_entry_value_field();
        let object = v
            .as_object()
            .ok_or_else(|| format!("{}: expected an object, found {v}", display(path)))?;
        let mut out = HashMap::with_capacity(object.len());
        for (k, item) in object {
            if item.is_null() {
                continue;
            }
            out.insert(
                MapKey::String(k.clone()),
                single_from_json(&value_fd.kind(), item, &format!("{path}[{k}]"))?,
            );
        }
        return Ok(Pb::Map(out));
    }
    if fd.is_list() {
        let items = v
            .as_array()
            .ok_or_else(|| format!("{}: expected a list, found {v}", display(path)))?;
        return items
            .iter()
            .enumerate()
            .map(|(i, item)| single_from_json(&fd.kind(), item, &format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map(Pb::List);
    }
    single_from_json(&fd.kind(), v, path)
}

fn single_from_json(kind: &Kind, v: &Value, path: &str) -> Result<prost_reflect::Value, String> {
    use prost_reflect::Value as Pb;
    let wrong = |expected: &str| format!("{}: expected {expected}, found {v}", display(path));
    let int = || v.as_i64().ok_or_else(|| wrong("an integer"));
    Ok(match kind {
        Kind::Message(desc) => Pb::Message(from_json_at(desc, v, path)?),
        Kind::String => Pb::String(v.as_str().ok_or_else(|| wrong("a string"))?.to_string()),
        Kind::Bool => Pb::Bool(v.as_bool().ok_or_else(|| wrong("a boolean"))?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Pb::I32(i32::try_from(int()?).map_err(|_| wrong("a 32-bit integer"))?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Pb::I64(int()?),
        Kind::Uint32 | Kind::Fixed32 => {
            Pb::U32(u32::try_from(int()?).map_err(|_| wrong("an unsigned 32-bit integer"))?)
        }
        Kind::Uint64 | Kind::Fixed64 => {
            Pb::U64(v.as_u64().ok_or_else(|| wrong("an unsigned integer"))?)
        }
        Kind::Double => Pb::F64(v.as_f64().ok_or_else(|| wrong("a number"))?),
        Kind::Float => Pb::F32(v.as_f64().ok_or_else(|| wrong("a number"))? as f32),
        Kind::Bytes => {
            let s = v.as_str().ok_or_else(|| wrong("base64 data"))?;
            Pb::Bytes(
                BASE64
                    .decode(s)
                    .map_err(|e| format!("{}: {e}", display(path)))?
                    .into(),
            )
        }
        Kind::Enum(_) => {
            Pb::EnumNumber(i32::try_from(int()?).map_err(|_| wrong("an enum number"))?)
        }
    })
}

fn display(path: &str) -> &str {
    if path.is_empty() { "the object" } else { path }
}

#[cfg(test)]
mod tests;
