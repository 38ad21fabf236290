//! The patch types of `PATCH`: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902) and Kubernetes' strategic merge patch, as the API server
//! applies them to the stored object's JSON.

use serde_json::{Map, Value};

use crate::cluster::ApiError;

/// A `PATCH` body's type, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn of(content_type: &str) -> Option<PatchType> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

fn bad(message: String) -> ApiError {
    ApiError::BadRequest { message }
}

/// Applies a JSON, merge or strategic merge patch to `target`.
pub fn apply(kind: PatchType, target: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    let mut out = target.clone();
    match kind {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_slice(patch)
                .map_err(|e| bad(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut out, &ops).map_err(|e| ApiError::Invalid {
                resource: String::new(),
                key: Default::default(),
                messages: vec![format!(
                    "the server rejected our request due to an error in our request: {e}"
                )],
            })?;
        }
        PatchType::Merge => {
            let p: Value = serde_json::from_slice(patch)
                .map_err(|e| bad(format!("error decoding patch: {e}")))?;
            json_patch::merge(&mut out, &p);
        }
        PatchType::Strategic => {
            let p: Value = serde_json::from_slice(patch)
                .map_err(|e| bad(format!("error decoding patch: {e}")))?;
            strategic(&mut out, &p);
        }
        PatchType::Apply => {
            return Err(bad("apply patches are merged by server-side apply".into()));
        }
    }
    Ok(out)
}

/// Whether a patch sets `metadata.resourceVersion`: then it is a
/// precondition and a conflict is the client's to resolve.
pub fn sets_resource_version(kind: PatchType, patch: &[u8]) -> bool {
    let Ok(p) = serde_json::from_slice::<Value>(patch) else {
        return false;
    };
    match kind {
        PatchType::Json => {
            p.as_array().into_iter().flatten().any(|op| {
                op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion")
            })
        }
        _ => p
            .pointer("/metadata/resourceVersion")
            .is_some_and(|v| !v.is_null()),
    }
}

/// The merge key of a list field, as the built-in types' `patchMergeKey`
/// tags declare it; `None` for lists that a patch replaces.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "containerStatuses"
        | "initContainerStatuses" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "conditions" | "addresses" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Lists of scalars whose patch strategy is `merge` (a set union).
fn merges_scalars(field: &str) -> bool {
    field == "finalizers"
}

/// Kubernetes' strategic merge patch for the built-in kinds: maps merge,
/// `null` deletes, lists with a merge key merge element by element
/// (`$patch: delete` removes one), `finalizers` unite, other lists are
/// replaced; `$patch: replace` replaces a map, and
/// `$deleteFromPrimitiveList/<field>` removes scalars.
pub fn strategic(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        replaced.remove("$patch");
        *target = Value::Object(replaced);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(t) = target.as_object_mut() else {
        return;
    };
    for (key, value) in patch {
        if let Some(list) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(remove)) = (t.get_mut(list), value.as_array()) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if key.starts_with('$') {
            // `$setElementOrder/...`, `$retainKeys`: ordering hints.
            continue;
        }
        match value {
            Value::Null => {
                t.remove(key);
            }
            Value::Object(_) => strategic(t.entry(key.clone()).or_insert(Value::Null), value),
            Value::Array(items) => {
                let merged = match (t.get(key), merge_key(key)) {
                    (Some(Value::Array(existing)), Some(k)) => merge_by_key(existing, items, k),
                    (Some(Value::Array(existing)), None) if merges_scalars(key) => {
                        let mut out = existing.clone();
                        for i in items {
                            if !out.contains(i) {
                                out.push(i.clone());
                            }
                        }
                        out
                    }
                    _ => items
                        .iter()
                        .filter(|i| i.get("$patch").is_none())
                        .cloned()
                        .collect(),
                };
                t.insert(key.clone(), Value::Array(merged));
            }
            v => {
                t.insert(key.clone(), v.clone());
            }
        }
    }
}

fn merge_by_key(existing: &[Value], patch: &[Value], key: &str) -> Vec<Value> {
    let mut out = existing.to_vec();
    for p in patch {
        let id = p.get(key);
        let at = out.iter().position(|e| id.is_some() && e.get(key) == id);
        if p.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = at {
                out.remove(i);
            }
            continue;
        }
        match at {
            Some(i) => strategic(&mut out[i], p),
            None => out.push(p.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_and_json_patches_follow_their_rfcs() {
        let t = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": [1, 2]}});
        let merged = apply(
            PatchType::Merge,
            &t,
            br#"{"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"x": [3]}}"#,
        )
        .unwrap();
        assert_eq!(
            merged,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"x": [3]}})
        );
        let patched = apply(
            PatchType::Json,
            &t,
            br#"[{"op": "add", "path": "/spec/x/-", "value": 9}, {"op": "remove", "path": "/metadata/labels/a"}]"#,
        )
        .unwrap();
        assert_eq!(
            patched,
            json!({"metadata": {"labels": {"b": "2"}}, "spec": {"x": [1, 2, 9]}})
        );
        let failed = apply(
            PatchType::Json,
            &t,
            br#"[{"op": "test", "path": "/spec/x/0", "value": 7}]"#,
        );
        assert_eq!(failed.unwrap_err().code(), 422);
        assert_eq!(apply(PatchType::Merge, &t, b"{").unwrap_err().code(), 400);
    }

    #[test]
    fn strategic_merge_merges_keyed_lists_and_unites_finalizers() {
        let t = json!({
            "metadata": {"finalizers": ["a"]},
            "spec": {"containers": [{"name": "app", "image": "v1"}, {"name": "side", "image": "s"}],
                     "tolerations": [{"key": "x"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        });
        let p = json!({
            "metadata": {"finalizers": ["b"]},
            "spec": {"containers": [{"name": "app", "image": "v2"}, {"name": "side", "$patch": "delete"}],
                     "tolerations": [{"key": "y"}],
                     "unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Other", "status": "True"}]}
        });
        let out = apply(PatchType::Strategic, &t, p.to_string().as_bytes()).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "app", "image": "v2"}])
        );
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "y"}]));
        assert_eq!(out["spec"]["unschedulable"], json!(true));
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "False"}, {"type": "Other", "status": "True"}])
        );
        let removed = apply(
            PatchType::Strategic,
            &out,
            br#"{"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}"#,
        )
        .unwrap();
        assert_eq!(removed["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn a_patch_that_names_a_resource_version_is_a_precondition() {
        assert!(sets_resource_version(
            PatchType::Merge,
            br#"{"metadata": {"resourceVersion": "5"}}"#
        ));
        assert!(!sets_resource_version(PatchType::Merge, br#"{"spec": {}}"#));
        assert!(sets_resource_version(
            PatchType::Json,
            br#"[{"op": "replace", "path": "/metadata/resourceVersion", "value": "5"}]"#
        ));
    }
}
