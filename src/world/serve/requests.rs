//! What a request carries, read as the API server reads it: JSON bodies,
//! `stringData`, create defaults, `DeleteOptions` and `fieldValidation`.

use super::*;

pub(super) fn bad(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        message: message.into(),
    }
}

/// A Secret's write-only `stringData`, merged into `data` (base64) over
/// the same keys, as the API server's conversion of a v1 Secret does.
pub(super) fn fold_string_data(obj: &mut Value) -> Result<(), ApiError> {
    use base64::Engine as _;
    let Some(map) = obj.as_object_mut() else {
        return Ok(());
    };
    let Some(string_data) = map.remove("stringData") else {
        return Ok(());
    };
    let entries = match string_data {
        Value::Null => return Ok(()),
        Value::Object(entries) => entries,
        other => {
            return Err(bad(format!(
                "stringData must be an object of strings, found {other}"
            )));
        }
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if data.is_null() {
        *data = json!({});
    }
    let data = data
        .as_object_mut()
        .ok_or_else(|| bad("data must be an object of base64 strings"))?;
    for (k, v) in entries {
        let v = v
            .as_str()
            .ok_or_else(|| bad(format!("stringData[{k}] must be a string")))?;
        data.insert(
            k,
            base64::engine::general_purpose::STANDARD.encode(v).into(),
        );
    }
    Ok(())
}

pub(super) fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body)
        .map_err(|e| bad(format!("the body of the request could not be decoded: {e}")))
}

/// What a pod, or a kind with a status subresource, looks like when the
/// API server has created it: a pod starts `Pending` with its defaults,
/// and other kinds' status is reset.
pub(super) fn prepare_create(kind: &str, mut obj: Value) -> Value {
    let Some(map) = obj.as_object_mut() else {
        return obj;
    };
    match kind {
        "Pod" => {
            let spec = map.entry("spec").or_insert_with(|| json!({}));
            if let Some(s) = spec.as_object_mut() {
                s.entry("terminationGracePeriodSeconds")
                    .or_insert(json!(30));
                s.entry("restartPolicy").or_insert(json!("Always"));
                s.entry("schedulerName")
                    .or_insert(json!("default-scheduler"));
                s.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
            }
            map.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": "BestEffort"}),
            );
        }
        "Namespace" => {
            // The namespace registry's defaults: the name label, the
            // `kubernetes` finalizer, and an active phase.
            let name = map
                .get("metadata")
                .and_then(|m| m.get("name"))
                .cloned()
                .unwrap_or(Value::Null);
            if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), name);
                }
            }
            map.insert("spec".into(), json!({"finalizers": ["kubernetes"]}));
            map.insert("status".into(), json!({"phase": "Active"}));
        }
        "Node" | "Event" | "ConfigMap" | "Secret" | "Lease" | "StorageClass" | "ServiceAccount"
        | "CSINode" => {}
        _ => {
            map.remove("status");
        }
    }
    obj
}

pub(super) fn delete_params(query: &Query, body: &[u8]) -> Result<DeleteParams, ApiError> {
    let options = parse_json(body)?;
    let mut p = delete_options(&options)?;
    if let Some(g) = query.int("gracePeriodSeconds")? {
        p.grace_period_seconds = Some(g);
    }
    if let Some(policy) = query.get("propagationPolicy") {
        p.propagation = propagation(policy)?;
    }
    p.dry_run |= query.dry_run()?;
    Ok(p)
}

/// A `propagationPolicy`, refused as the API server refuses others.
pub(super) fn propagation(policy: &str) -> Result<Propagation, ApiError> {
    match policy {
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        "Orphan" => Ok(Propagation::Orphan),
        other => Err(ApiError::Invalid {
            resource: "DeleteOptions.meta.k8s.io".into(),
            key: ObjectKey::default(),
            messages: vec![format!(
                "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )],
        }),
    }
}

/// `DeleteOptions` from a JSON body (an Eviction's `deleteOptions`, or a
/// DELETE's body).
pub(super) fn delete_options(v: &Value) -> Result<DeleteParams, ApiError> {
    if v.is_null() {
        return Ok(DeleteParams::default());
    }
    let dry_run = match v.get("dryRun") {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) if a.is_empty() => false,
        Some(Value::Array(a)) if a.iter().all(|x| x == "All") => true,
        Some(other) => {
            return Err(bad(format!(
                "Invalid dry run value: {other}: supported values: \"All\""
            )));
        }
    };
    Ok(DeleteParams {
        preconditions: Preconditions {
            uid: v
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(String::from),
            resource_version: v
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(String::from),
        },
        grace_period_seconds: v.get("gracePeriodSeconds").and_then(Value::as_i64),
        propagation: match v.get("propagationPolicy").and_then(Value::as_str) {
            Some(policy) => propagation(policy)?,
            None if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) => {
                Propagation::Orphan
            }
            None => Propagation::Background,
        },
        dry_run,
    })
}

/// `fieldValidation`: `Strict` refuses undeclared fields (400), `Warn`
/// (the default) answers with a `Warning` header for each, `Ignore` drops
/// them silently.
pub(super) fn field_validation(
    kind: &dyn ServedKind,
    obj: &Value,
    query: &Query,
) -> Result<Vec<String>, ApiError> {
    let mode = query.get("fieldValidation").unwrap_or("Warn");
    if !matches!(mode, "Strict" | "Warn" | "Ignore" | "") {
        return Err(bad(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    if mode == "Ignore" {
        return Ok(Vec::new());
    }
    let unknown = kind.unknown_fields(obj)?;
    let messages: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field \"{}\"", p.trim_start_matches('.')))
        .collect();
    if mode == "Strict" && !messages.is_empty() {
        let m = kind.meta();
        return Err(bad(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            m.kind,
            m.version,
            m.kind,
            messages.join(", ")
        )));
    }
    Ok(messages)
}

/// 415, with the API server's message for a patch type the resource
/// does not take.
pub(super) fn unsupported_media() -> ApiError {
    ApiError::UnsupportedMediaType {
        message: "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
    }
}
