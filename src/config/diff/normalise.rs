//! Normalising objects for comparison, the field paths two objects differ
//! at, and their YAML for a unified diff.
//!
//! Two objects are equal when they would be the same object to the API
//! server: map key order is ignored, defaults are applied on both sides, and
//! what the server or dovetail itself writes is left out.

use serde_json::{Map, Value};

use crate::api::{ApiKind, CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use crate::diag::JsonPath;

/// `metadata` fields the API server manages; never part of a change.
pub const SERVER_MANAGED_METADATA: [&str; 8] = [
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "generation",
    "managedFields",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// The prefix of dovetail's own annotations (`dovetail.dev/revision`, ...),
/// which record where an object came from rather than what it is.
pub const DOVETAIL_ANNOTATION_PREFIX: &str = "dovetail.dev/";

/// Written by `kubectl apply` to remember the previous apply: bookkeeping of
/// the client, not part of the object's meaning.
pub const KUBECTL_LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The object as it is compared: deserialised into its typed API object with
/// the API server's defaults applied and serialised back (the raw value when
/// it does not deserialise, e.g. on an invalid revision), without `status`,
/// server-managed metadata and `dovetail.dev/*` annotations, keys sorted.
pub fn normalise(kind: ApiKind, raw: &Value) -> Value {
    let mut value = defaulted(kind, raw).unwrap_or_else(|| raw.clone());
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            strip_metadata(metadata);
        }
    }
    sorted(value)
}

fn defaulted(kind: ApiKind, raw: &Value) -> Option<Value> {
    fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(
        raw: &Value,
        apply_defaults: impl FnOnce(&mut T),
    ) -> Option<Value> {
        let mut object: T = serde_json::from_value(raw.clone()).ok()?;
        apply_defaults(&mut object);
        serde_json::to_value(object).ok()
    }
    match kind {
        ApiKind::NodePool => typed(raw, NodePool::apply_defaults),
        ApiKind::NodeClaim => typed(raw, NodeClaim::apply_defaults),
        ApiKind::EC2NodeClass => typed(raw, EC2NodeClass::apply_defaults),
        ApiKind::NodeOverlay => typed(raw, |_: &mut NodeOverlay| {}),
        ApiKind::CapacityBuffer => typed(raw, CapacityBuffer::apply_defaults),
    }
}

fn strip_metadata(metadata: &mut Map<String, Value>) {
    for field in SERVER_MANAGED_METADATA {
        metadata.remove(field);
    }
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations
            .retain(|k, _| !k.starts_with(DOVETAIL_ANNOTATION_PREFIX) && k != KUBECTL_LAST_APPLIED);
        if annotations.is_empty() {
            metadata.remove("annotations");
        }
    }
}

/// `value` with the keys of every map in sorted order (whatever order
/// `serde_json::Map` keeps).
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// The paths at which `old` and `new` differ, in order: a key present on
/// one side only, a list item beyond the other list's end, or a differing
/// value (maps are compared key by key, lists item by item).
pub fn changed_paths(old: &Value, new: &Value) -> Vec<JsonPath> {
    let mut out = Vec::new();
    collect_changes(old, new, &JsonPath::root(), &mut out);
    out
}

fn collect_changes(old: &Value, new: &Value, at: &JsonPath, out: &mut Vec<JsonPath>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let path = at.key(key.as_str());
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => collect_changes(x, y, &path, out),
                    _ => out.push(path),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let path = at.index(i);
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => collect_changes(x, y, &path, out),
                    _ => out.push(path),
                }
            }
        }
        _ if old != new => out.push(at.clone()),
        _ => {}
    }
}

/// A normalised object as YAML (JSON, which is YAML too, should the YAML
/// serialiser ever refuse a value).
pub fn to_yaml(value: &Value) -> String {
    serde_saphyr::to_string(value)
        .or_else(|_| serde_json::to_string_pretty(value).map(|s| s + "\n"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(spec_extra: Value) -> Value {
        let mut pool = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "a"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
            }}}
        });
        if let (Some(spec), Some(extra)) = (pool["spec"].as_object_mut(), spec_extra.as_object()) {
            spec.extend(extra.clone());
        }
        pool
    }

    #[test]
    fn spelled_out_defaults_are_equal_to_omitted_ones() {
        let bare = normalise(ApiKind::NodePool, &pool(json!({})));
        let spelled = pool(json!({"disruption": {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "0s",
            "budgets": [{"nodes": "10%"}]
        }}));
        let mut spelled = spelled;
        spelled["spec"]["template"]["spec"]["expireAfter"] = json!("720h");
        assert_eq!(normalise(ApiKind::NodePool, &spelled), bare);
        let changed = pool(json!({"disruption": {"consolidateAfter": "5m"}}));
        assert_eq!(
            changed_paths(&bare, &normalise(ApiKind::NodePool, &changed)),
            [JsonPath::parse("spec.disruption.consolidateAfter")]
        );
    }

    #[test]
    fn server_managed_fields_status_and_dovetail_annotations_are_ignored() {
        let plain = pool(json!({}));
        let mut live = plain.clone();
        live["metadata"] = json!({
            "name": "a",
            "uid": "0b5f", "resourceVersion": "12", "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "dovetail"}],
            "annotations": {
                "dovetail.dev/revision": "main@sha1:abc",
                "dovetail.dev/source": "a.yaml",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"kind\":\"NodePool\"}"
            }
        });
        live["status"] = json!({"nodes": 3});
        assert_eq!(
            normalise(ApiKind::NodePool, &live),
            normalise(ApiKind::NodePool, &plain)
        );
        let mut annotated = plain.clone();
        annotated["metadata"]["annotations"] =
            json!({"team": "a", "dovetail.dev/prune": "disabled"});
        assert_eq!(
            changed_paths(
                &normalise(ApiKind::NodePool, &plain),
                &normalise(ApiKind::NodePool, &annotated)
            ),
            [JsonPath::parse("metadata.annotations")]
        );
    }

    #[test]
    fn objects_that_do_not_deserialise_are_compared_raw() {
        let broken = json!({"kind": "NodePool", "spec": {"weight": "heavy"}, "status": {}});
        assert_eq!(
            normalise(ApiKind::NodePool, &broken),
            json!({"kind": "NodePool", "spec": {"weight": "heavy"}})
        );
    }

    #[test]
    fn changed_paths_name_keys_and_list_items() {
        let old = json!({"a": {"b": 1, "c": [1, 2]}, "d": true});
        let new = json!({"a": {"b": 2, "c": [1, 3, 4]}, "e": null});
        let paths: Vec<String> = changed_paths(&old, &new)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(paths, ["a.b", "a.c[1]", "a.c[2]", "d", "e"]);
        assert!(changed_paths(&old, &old).is_empty());
    }

    #[test]
    fn yaml_has_sorted_keys() {
        let value = sorted(json!({"b": 1, "a": {"d": [1], "c": "x"}}));
        assert_eq!(to_yaml(&value), "a:\n  c: x\n  d:\n  - 1\nb: 1\n");
    }
}
