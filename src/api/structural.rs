//! What the API server does to a custom resource's JSON before it
//! validates it, by the CRD's structural schema
//! ([`super::crd::openapi_schema`]): it drops the `null` of every field
//! that is not `nullable` and has no `default`
//! (apiextensions-apiserver's `PruneNonNullableNullsWithoutDefaults`), then
//! defaults what is absent, or `null` and not `nullable`. A Go client sends
//! `null` for every nil slice or map whose field has no `omitempty`
//! (Karpenter's EC2NodeClass `capacityReservationSelectorTerms`), and a
//! YAML key without a value is `null` too: the API server accepts both as
//! if the key were not there.

use std::sync::OnceLock;

use serde_json::Value;

use super::ApiKind;

/// The CRD's schema of `kind` (its served version's `openAPIV3Schema`).
pub fn schema(kind: ApiKind) -> &'static Value {
    static SCHEMAS: OnceLock<Vec<(ApiKind, Value)>> = OnceLock::new();
    let all = SCHEMAS.get_or_init(|| {
        ApiKind::ALL
            .into_iter()
            .map(|k| (k, super::crd::openapi_schema(k)))
            .collect()
    });
    &all.iter()
        .find(|(k, _)| *k == kind)
        .expect("every ApiKind has a CRD")
        .1
}

/// The schema of an object's field `key`: its property, or the object's
/// `additionalProperties` (a map's values).
fn field<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

fn nullable(schema: &Value) -> bool {
    schema.get("nullable").and_then(Value::as_bool) == Some(true)
}

/// Drops every `null` of a field that is neither `nullable` nor
/// defaulted, at any depth (fields the schema does not know are left to
/// pruning or to strict field validation).
pub fn prune_nulls(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, child| {
                !(child.is_null()
                    && field(schema, k).is_some_and(|s| !nullable(s) && s.get("default").is_none()))
            });
            for (k, child) in map.iter_mut() {
                if let Some(s) = field(schema, k) {
                    prune_nulls(s, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for item in items {
                    prune_nulls(s, item);
                }
            }
        }
        _ => {}
    }
}

/// The API server's structural defaulting: a field with a `default` that
/// is absent (or `null` and not `nullable`) from an object that is present
/// gets its default, and defaults apply inside defaults.
pub fn apply_defaults(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    let missing = map.get(k).is_none_or(|c| c.is_null() && !nullable(s));
                    if missing && let Some(d) = s.get("default") {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = map.get_mut(k) {
                        apply_defaults(s, child);
                    }
                }
            }
            if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in map.values_mut() {
                    apply_defaults(extra, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for item in items {
                    apply_defaults(s, item);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nulls_of_fields_neither_nullable_nor_defaulted_are_dropped_at_any_depth() {
        let schema = json!({
            "type": "object",
            "properties": {
                "terms": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}},
                }},
                "maybe": {"type": "string", "nullable": true},
                "policy": {"type": "string", "default": "Delete"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        });
        let mut v = json!({
            "terms": [{"tags": null}, {"tags": {"a": null}}],
            "maybe": null,
            "policy": null,
            "labels": {"k": null},
            "unknown": null,
        });
        prune_nulls(&schema, &mut v);
        assert_eq!(
            v,
            json!({
                "terms": [{}, {"tags": {}}],
                "maybe": null,
                "policy": null,
                "labels": {},
                "unknown": null,
            })
        );
        // The defaulted one gets its default, the nullable one stays.
        apply_defaults(&schema, &mut v);
        assert_eq!(v["policy"], "Delete");
        assert_eq!(v["maybe"], Value::Null);
    }

    #[test]
    fn a_go_clients_nil_capacity_reservation_terms_are_dropped() {
        let mut class = json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "a"},
            "spec": {"capacityReservationSelectorTerms": null, "role": "r"},
        });
        prune_nulls(schema(ApiKind::EC2NodeClass), &mut class);
        assert_eq!(class["spec"], json!({"role": "r"}));
    }
}
