//! The served API's answers: JSON bodies, `Status` objects with the API
//! server's codes and reasons, content negotiation (JSON, Tables, protobuf)
//! and list bodies.

use super::*;

pub(super) fn json_response(code: u16, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache, private"),
    );
    r
}

pub(super) fn value_response(code: u16, v: &Value) -> Response<Body> {
    json_response(code, serde_json::to_vec(v).unwrap_or_default())
}

/// The `Status` of a failure, with the HTTP code, and a `Retry-After`
/// header when the status suggests one.
pub(super) fn status_response(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Response<Body> {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    let retry_after = details
        .as_ref()
        .and_then(|d| d.get("retryAfterSeconds"))
        .and_then(Value::as_u64)
        .filter(|s| *s > 0);
    if let Some(d) = details {
        body["details"] = d;
    }
    let mut r = value_response(code, &body);
    if let Some(s) = retry_after
        && let Ok(v) = header::HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// The `Status` of an [`ApiError`], as the API server writes it. An
/// eviction refused by a budget carries its reason as a cause, as the
/// eviction subresource does.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let status = kube::core::Status::from(e.clone());
    let details = status.details.as_ref().map(|d| {
        let mut v = json!({});
        for (field, value) in [("name", &d.name), ("group", &d.group), ("kind", &d.kind)] {
            if !value.is_empty() {
                v[field] = value.clone().into();
            }
        }
        if d.retry_after_seconds > 0 {
            v["retryAfterSeconds"] = d.retry_after_seconds.into();
        }
        if !d.causes.is_empty() {
            // A cause without a field (a budget's) has no `field` key.
            v["causes"] = d
                .causes
                .iter()
                .map(|c| {
                    let mut cause = json!({"reason": c.reason, "message": c.message});
                    if !c.field.is_empty() {
                        cause["field"] = c.field.clone().into();
                    }
                    cause
                })
                .collect();
        }
        v
    });
    status_response(status.code, &status.reason, &status.message, details)
}

pub(super) fn success_status(code: u16, details: Option<Value>) -> Response<Body> {
    let mut body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code});
    if let Some(d) = details {
        body["details"] = d;
    }
    value_response(code, &body)
}

/// The Accept header asks for a Table.
pub(super) fn wants_table(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|m| m.contains("as=Table")))
}

/// The encoding a client accepts for a resource's answer, from its
/// `Accept` header, as the API server negotiates it: the first media type
/// it names that the server writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Json,
    /// Protobuf where the kind has a message, JSON otherwise (the client
    /// also accepts JSON, as client-go's `application/vnd.kubernetes.protobuf, */*`).
    Protobuf,
    /// Protobuf only: a kind without a message (a custom resource) is 406.
    ProtobufOnly,
}

pub(super) fn negotiate(req: &Request<Incoming>) -> Wire {
    let ranges: Vec<String> = req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|m| {
            m.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|m| !m.is_empty())
        .collect();
    let json = |m: &str| {
        matches!(
            m,
            "application/json" | "*/*" | "application/*" | "application/yaml"
        )
    };
    match ranges.iter().position(|m| protobuf::is_protobuf(m)) {
        Some(i) if ranges[..i].iter().any(|m| json(m)) => Wire::Json,
        Some(i) if ranges[i..].iter().any(|m| json(m)) => Wire::Protobuf,
        Some(_) => Wire::ProtobufOnly,
        None => Wire::Json,
    }
}

/// 406, as the API server answers a client that accepts only what the
/// resource cannot be written as.
pub(super) fn not_acceptable() -> Response<Body> {
    status_response(
        406,
        "NotAcceptable",
        "the server was unable to respond with a content type that the client supports",
        None,
    )
}

/// A JSON answer written in protobuf for a client that asked for it:
/// objects, lists and `Status` of the built-in kinds. Other answers stay
/// JSON, or are 406 when the client takes nothing but protobuf.
pub(super) async fn encode_answer(response: Response<Body>, wire: Wire) -> Response<Body> {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if wire == Wire::Json || !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(collected) = body.collect().await;
    let bytes = collected.to_bytes();
    let encoded = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| protobuf::encode(&v));
    match encoded {
        Some(Ok(body)) => {
            parts.headers.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(protobuf::MEDIA_TYPE),
            );
            Response::from_parts(parts, Full::new(Bytes::from(body)).boxed())
        }
        Some(Err(error)) => {
            tracing::warn!(%error, "cannot write an answer in protobuf");
            status_response(
                500,
                "InternalError",
                &format!("the answer could not be written in protobuf: {error}"),
                None,
            )
        }
        None if wire == Wire::ProtobufOnly => not_acceptable(),
        None => Response::from_parts(parts, Full::new(bytes).boxed()),
    }
}

/// Adds a `Warning: 299 - "..."` header per message, as the API server
/// does.
pub(super) fn with_warnings(mut r: Response<Body>, warnings: &[String]) -> Response<Body> {
    for w in warnings {
        let text = format!("299 - {:?}", w);
        if let Ok(v) = header::HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

pub(super) fn not_found_path() -> Response<Body> {
    status_response(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    )
}

/// 410 for a `continue` token whose snapshot is gone, with the API
/// server's message.
pub(super) fn expired_continue() -> Response<Body> {
    status_response(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        None,
    )
}

pub(super) fn object_response(code: u16, obj: &Stored) -> Response<Body> {
    let mut out = Vec::with_capacity(1024);
    obj.write_json(&mut out);
    json_response(code, out)
}

/// A `...List` of objects, written without building a JSON tree.
pub(super) fn list_response(
    meta: &kinds::KindMeta,
    items: &[Stored],
    rv: u64,
    cont: Option<&str>,
    remaining: Option<usize>,
) -> Response<Body> {
    let mut out = Vec::with_capacity(256 + items.len() * 2048);
    let mut list_meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        list_meta["continue"] = c.into();
    }
    if let Some(r) = remaining {
        list_meta["remainingItemCount"] = r.into();
    }
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            meta.kind,
            meta.group_version(),
            list_meta
        )
        .as_bytes(),
    );
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        o.write_json(&mut out);
    }
    out.extend_from_slice(b"]}");
    json_response(200, out)
}
