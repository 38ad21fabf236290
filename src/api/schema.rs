//! JSON Schemas (draft 2020-12) for validating NodePool, NodeClaim,
//! EC2NodeClass, NodeOverlay and CapacityBuffer documents with the `jsonschema` crate, derived from the
//! CRDs' `openAPIV3Schema` and checked in as `schemas/<kind>.schema.json`.
//!
//! The translation from the Kubernetes structural schema:
//! - the root gets `apiVersion` and `kind` (each a `const`) and `metadata`
//!   (an object with a required, non-empty `name`; other ObjectMeta fields
//!   are allowed, labels and annotations are string maps), all required;
//! - every object with `properties` is strict (`additionalProperties: false`)
//!   as the API server's strict field validation is; maps keep their
//!   `additionalProperties` schema and `x-kubernetes-preserve-unknown-fields`
//!   objects stay open;
//! - `nullable: true` becomes a `null` alternative of `type`;
//!   `x-kubernetes-int-or-string` becomes `anyOf: [integer, string]`;
//!   `x-kubernetes-list-type: set` becomes `uniqueItems: true`;
//! - a property with a `default` is not `required`: the API server applies
//!   defaults before it validates, so leaving such a field out is valid;
//! - the other `x-kubernetes-*` keywords, CEL rules included, are dropped:
//!   CEL is checked natively by the validator.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::ApiKind;
use super::crd::{for_each_subschema, openapi_schema};

/// The JSON Schema `dovetail validate` checks documents of `kind` against.
pub fn validation_schema(kind: ApiKind) -> Value {
    let mut schema = openapi_schema(kind);
    translate(&mut schema);
    let root = schema
        .as_object_mut()
        .expect("the root schema is an object");
    let properties = root
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("properties is an object");
    // A kind's previous version has the same schema; `validate` warns
    // about it.
    let api_version = match kind.previous_api_version() {
        Some(previous) => json!({"type": "string", "enum": [kind.api_version(), previous]}),
        None => json!({"type": "string", "const": kind.api_version()}),
    };
    properties.insert("apiVersion".into(), api_version);
    properties.insert(
        "kind".into(),
        json!({"type": "string", "const": kind.kind()}),
    );
    properties.insert("metadata".into(), metadata_schema());
    let required = root
        .entry("required")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .expect("required is an array");
    for name in ["metadata", "kind", "apiVersion"] {
        required.insert(0, name.into());
    }
    let mut document = Map::new();
    document.insert(
        "$schema".into(),
        "https://json-schema.org/draft/2020-12/schema".into(),
    );
    document.insert(
        "$id".into(),
        format!(
            "https://dovetail.dev/schemas/{}.schema.json",
            kind.singular()
        )
        .into(),
    );
    document.insert("title".into(), kind.kind().into());
    document.extend(std::mem::take(root));
    Value::Object(document)
}

/// The file name of a kind's JSON Schema under `schemas/`.
pub fn schema_file_name(kind: ApiKind) -> String {
    format!("{}.schema.json", kind.singular())
}

/// The checked-in JSON Schema files: `(file name, contents)` pairs.
pub fn schema_files() -> Vec<(String, String)> {
    ApiKind::ALL
        .into_iter()
        .map(|kind| {
            let json = serde_json::to_string_pretty(&validation_schema(kind))
                .expect("a schema serialises to JSON");
            (schema_file_name(kind), format!("{json}\n"))
        })
        .collect()
}

/// Writes the JSON Schema files into `dir`, creating it if needed; never
/// through a symlink (see [`crate::fsutil::write_files_into`]).
pub fn write_schemas(dir: &Path) -> Result<(), crate::fsutil::WriteError> {
    crate::fsutil::write_files_into(dir, schema_files())
}

/// The schema of `metadata`: ObjectMeta as far as a config file uses it.
fn metadata_schema() -> Value {
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "namespace": {"type": "string"},
            "labels": string_map,
            "annotations": string_map,
        },
    })
}

/// Translates one structural-schema node (and its subschemas) to JSON Schema.
fn translate(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    for_each_subschema(object, translate);

    if object.remove("x-kubernetes-int-or-string") == Some(Value::Bool(true))
        && !object.contains_key("anyOf")
    {
        object.insert(
            "anyOf".into(),
            json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    if object.remove("nullable") == Some(Value::Bool(true))
        && let Some(Value::String(ty)) = object.get("type")
    {
        let ty = ty.clone();
        object.insert("type".into(), json!([ty, "null"]));
    }
    if object.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set") {
        object.insert("uniqueItems".into(), true.into());
    }
    let preserve_unknown =
        object.remove("x-kubernetes-preserve-unknown-fields") == Some(Value::Bool(true));
    object.retain(|key, _| !key.starts_with("x-kubernetes-"));

    let is_object = object.get("type").and_then(Value::as_str) == Some("object");
    if is_object && !preserve_unknown && !object.contains_key("additionalProperties") {
        object.insert("additionalProperties".into(), false.into());
    }

    let defaulted: Vec<String> = object
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .filter(|(_, p)| p.get("default").is_some())
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Array(required)) = object.get_mut("required") {
        required.retain(|name| !defaulted.iter().any(|d| name == d.as_str()));
        if required.is_empty() {
            object.remove("required");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{EC2NodeClass, NodeClaim, NodePool};

    fn validator(kind: ApiKind) -> jsonschema::Validator {
        jsonschema::validator_for(&validation_schema(kind)).expect("the schema compiles")
    }

    fn errors(kind: ApiKind, doc: &Value) -> Vec<String> {
        validator(kind)
            .iter_errors(doc)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    }

    fn yaml(text: &str) -> Value {
        serde_saphyr::from_str(text).expect("test YAML parses")
    }

    /// The checked-in schemas under `schemas/` are what the types generate.
    /// `DOVETAIL_BLESS=1` rewrites them instead of failing.
    #[test]
    fn checked_in_schemas_are_up_to_date() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
        if std::env::var_os("DOVETAIL_BLESS").is_some_and(|v| v == "1") {
            write_schemas(&dir).expect("write schemas/");
        }
        let mut stale = Vec::new();
        for (name, generated) in schema_files() {
            let checked_in = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            if checked_in != generated {
                stale.push(name);
            }
        }
        assert!(
            stale.is_empty(),
            "schemas/ is out of date ({}): run `DOVETAIL_BLESS=1 cargo test --lib api::` to regenerate",
            stale.join(", ")
        );
    }

    #[test]
    fn translation_of_structural_keywords() {
        let mut schema = json!({
            "type": "object",
            "required": ["a", "b", "c"],
            "properties": {
                "a": {"type": "string", "nullable": true, "default": "x"},
                "b": {"x-kubernetes-int-or-string": true},
                "c": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "d": {"type": "object", "additionalProperties": {"type": "string"}},
                "e": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "f": {"type": "string", "x-kubernetes-validations": [{"rule": "self != ''"}]},
            },
        });
        translate(&mut schema);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["b", "c"],
                "properties": {
                    "a": {"type": ["string", "null"], "default": "x"},
                    "b": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "c": {"type": "object"},
                    "d": {"type": "object", "additionalProperties": {"type": "string"}},
                    "e": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                    "f": {"type": "string"},
                },
            })
        );
    }

    /// With format checking on (as `dovetail validate` may use it), the
    /// Kubernetes-only formats (`int32`, `int64`) are ignored and
    /// `date-time` is checked.
    #[test]
    fn formats_can_be_validated() {
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&validation_schema(ApiKind::NodeClaim))
            .expect("the schema compiles with format checking");
        let mut claim = serde_json::to_value(NodeClaim::test("a")).expect("serialise");
        claim["spec"]["taints"] =
            json!([{"key": "a", "effect": "NoSchedule", "timeAdded": "yesterday"}]);
        let errors: Vec<String> = validator
            .iter_errors(&claim)
            .map(|e| e.instance_path().to_string())
            .collect();
        assert_eq!(errors, ["/spec/taints/0/timeAdded"]);
    }

    #[test]
    fn test_builders_are_valid() {
        let docs = [
            (
                ApiKind::NodePool,
                serde_json::to_value(NodePool::test("default")),
            ),
            (
                ApiKind::NodeClaim,
                serde_json::to_value(NodeClaim::test("default-abcde")),
            ),
            (
                ApiKind::EC2NodeClass,
                serde_json::to_value(EC2NodeClass::test("default")),
            ),
        ];
        for (kind, doc) in docs {
            let doc = doc.expect("serialise");
            assert_eq!(errors(kind, &doc), Vec::<String>::new(), "{kind}");
        }
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let doc = yaml(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n      expireAfterr: 1h\n",
        );
        let errors = errors(ApiKind::NodePool, &doc);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("/spec/template/spec"), "{errors:?}");
    }

    #[test]
    fn maps_accept_any_key_and_check_values() {
        let base = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n";
        let ok = yaml(&format!(
            "{base}  limits: {{cpu: 1000, memory: 1000Gi, nvidia.com/gpu: '2'}}\n"
        ));
        assert_eq!(errors(ApiKind::NodePool, &ok), Vec::<String>::new());
        let bad = yaml(&format!("{base}  limits: {{cpu: lots}}\n"));
        assert_eq!(errors(ApiKind::NodePool, &bad).len(), 1);
    }

    #[test]
    fn patterns_enums_and_bounds_are_checked() {
        let doc = yaml(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  weight: 101\n  disruption: {consolidateAfter: 5 minutes, consolidationPolicy: Sometimes}\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: [{key: a, operator: Near}]\n",
        );
        let errors = errors(ApiKind::NodePool, &doc);
        for path in [
            "/spec/weight",
            "/spec/disruption/consolidateAfter",
            "/spec/disruption/consolidationPolicy",
            "/spec/template/spec/requirements/0/operator",
        ] {
            assert!(
                errors.iter().any(|e| e.starts_with(&format!("{path}:"))),
                "{path}: {errors:?}"
            );
        }
        assert_eq!(errors.len(), 4, "{errors:?}");
    }

    #[test]
    fn defaulted_fields_may_be_left_out() {
        // `nodes` is required in the CRD but has a default, which the API
        // server applies before validating.
        let doc = yaml(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  disruption:\n    consolidateAfter: 1m\n    budgets: [{schedule: '0 9 * * mon-fri', duration: 8h}]\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
        );
        assert_eq!(errors(ApiKind::NodePool, &doc), Vec::<String>::new());
    }

    #[test]
    fn type_meta_and_name_are_required() {
        let doc = yaml("apiVersion: karpenter.k8s.aws/v1\nkind: NodePool\nmetadata: {}\n");
        let errors = errors(ApiKind::EC2NodeClass, &doc);
        assert!(errors.iter().any(|e| e.starts_with("/kind:")), "{errors:?}");
        assert!(
            errors.iter().any(|e| e.starts_with("/metadata:")),
            "{errors:?}"
        );
    }

    #[test]
    fn string_sets_are_unique() {
        let doc = yaml(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  disruption: {consolidateAfter: 0s, budgets: [{nodes: '1', reasons: [Empty, Empty]}]}\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
        );
        let errors = errors(ApiKind::NodePool, &doc);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("/spec/disruption/budgets/0/reasons:"),
            "{errors:?}"
        );
    }
}
