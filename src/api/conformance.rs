//! Conformance of the generated CRDs with the Karpenter v1.14.1 reference
//! CRDs in `../shared/reference/karpenter-v1.14.1-crds/`.
//!
//! Both schemas are walked together. At every path each keyword must be
//! equal (type, format, enum, pattern, bounds, lengths, item counts,
//! defaults, `anyOf`, the `x-kubernetes-*` extensions...) except
//! `description`; `required` is compared as a set; CEL rules are compared
//! rule and message, in order. A property on one side only is reported
//! as missing or extra. The rest of the CRD (names, scope, printer columns,
//! subresources) must be equal too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::ApiKind;
use super::crd::crd;

/// The reference CRDs live in `shared/` beside the repository (`../shared`
/// from the crate root, as in CI); from a git worktree nested one level
/// deeper, the nearest ancestor's `shared/` is used.
fn reference_path(kind: ApiKind) -> PathBuf {
    const REFERENCE_DIR: &str = "shared/reference/karpenter-v1.14.1-crds";
    let crate_root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = crate_root
        .ancestors()
        .skip(1)
        .map(|ancestor| ancestor.join(REFERENCE_DIR))
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| crate_root.join("..").join(REFERENCE_DIR));
    dir.join(super::crd::crd_file_name(kind))
}

fn reference(kind: ApiKind) -> Value {
    let path = reference_path(kind);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read reference CRD {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

fn generated(kind: ApiKind) -> Value {
    serde_json::to_value(crd(kind)).expect("a CRD serialises to JSON")
}

/// Equality of JSON values with numbers compared by value (`100` == `100.0`).
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(Some(x), Some(y)))
        }
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.len() == y.len() && x.iter().all(|(k, v)| same(Some(v), y.get(k)))
        }
        (a, b) => a == b,
    }
}

/// Keywords handled structurally rather than compared as values.
const STRUCTURAL: [&str; 6] = [
    "description",
    "properties",
    "items",
    "additionalProperties",
    "required",
    "x-kubernetes-validations",
];

/// Compares two schemas, appending one line per difference to `diffs`.
fn compare_schema(path: &str, reference: &Value, generated: &Value, diffs: &mut Vec<String>) {
    let (Some(r), Some(g)) = (reference.as_object(), generated.as_object()) else {
        if reference != generated {
            diffs.push(format!("{path}: {reference} != {generated}"));
        }
        return;
    };
    let keys: BTreeSet<&String> = r.keys().chain(g.keys()).collect();
    for key in keys
        .into_iter()
        .filter(|k| !STRUCTURAL.contains(&k.as_str()))
    {
        if !same(r.get(key), g.get(key)) {
            diffs.push(format!(
                "{path}: {key}: reference {} != generated {}",
                show(r.get(key)),
                show(g.get(key))
            ));
        }
    }
    let required = |o: &Map<String, Value>| -> BTreeSet<String> {
        o.get("required")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    if required(r) != required(g) {
        diffs.push(format!(
            "{path}: required: reference {:?} != generated {:?}",
            required(r),
            required(g)
        ));
    }
    compare_rules(
        path,
        r.get("x-kubernetes-validations"),
        g.get("x-kubernetes-validations"),
        diffs,
    );

    let empty = Map::new();
    let props = |o: &'_ Map<String, Value>| -> Map<String, Value> {
        o.get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty)
            .clone()
    };
    let (rp, gp) = (props(r), props(g));
    for (name, rs) in &rp {
        match gp.get(name) {
            Some(gs) => compare_schema(&format!("{path}.{name}"), rs, gs, diffs),
            None => diffs.push(format!("{path}.{name}: missing in generated CRD")),
        }
    }
    for name in gp.keys().filter(|n| !rp.contains_key(*n)) {
        diffs.push(format!("{path}.{name}: extra in generated CRD"));
    }
    for key in ["items", "additionalProperties"] {
        match (r.get(key), g.get(key)) {
            (Some(rs), Some(gs)) => compare_schema(&format!("{path}.{key}"), rs, gs, diffs),
            (None, None) => {}
            (rs, gs) => diffs.push(format!(
                "{path}: {key}: reference {} != generated {}",
                show(rs),
                show(gs)
            )),
        }
    }
}

fn compare_rules(
    path: &str,
    reference: Option<&Value>,
    generated: Option<&Value>,
    diffs: &mut Vec<String>,
) {
    let rules = |v: Option<&Value>| -> Vec<Value> {
        v.and_then(Value::as_array).cloned().unwrap_or_default()
    };
    let (r, g) = (rules(reference), rules(generated));
    if r == g {
        return;
    }
    let describe =
        |rule: &Value| format!("{} ({})", show(rule.get("rule")), show(rule.get("message")));
    for rule in r.iter().filter(|rule| !g.contains(rule)) {
        diffs.push(format!("{path}: CEL rule missing: {}", describe(rule)));
    }
    for rule in g.iter().filter(|rule| !r.contains(rule)) {
        diffs.push(format!("{path}: CEL rule extra: {}", describe(rule)));
    }
    if r.len() == g.len() && r.iter().all(|rule| g.contains(rule)) {
        diffs.push(format!("{path}: CEL rules in a different order"));
    }
}

fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "(absent)".to_string(), Value::to_string)
}

/// Compares everything but the schema: metadata, names, scope, versions.
fn compare_crd(reference: &Value, generated: &Value, diffs: &mut Vec<String>) {
    for pointer in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/annotations",
        "/spec/group",
        "/spec/names",
        "/spec/scope",
    ] {
        if reference.pointer(pointer) != generated.pointer(pointer) {
            diffs.push(format!(
                "{pointer}: reference {} != generated {}",
                show(reference.pointer(pointer)),
                show(generated.pointer(pointer))
            ));
        }
    }
    let versions = |v: &Value| {
        v.pointer("/spec/versions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (rv, gv) = (versions(reference), versions(generated));
    if rv.len() != gv.len() {
        diffs.push(format!(
            "/spec/versions: {} versions != {}",
            rv.len(),
            gv.len()
        ));
    }
    for (r, g) in rv.iter().zip(&gv) {
        for key in [
            "name",
            "served",
            "storage",
            "subresources",
            "additionalPrinterColumns",
        ] {
            if r.get(key) != g.get(key) {
                diffs.push(format!(
                    "/spec/versions/{key}: reference {} != generated {}",
                    show(r.get(key)),
                    show(g.get(key))
                ));
            }
        }
        let schema = |v: &Value| {
            v.pointer("/schema/openAPIV3Schema")
                .cloned()
                .unwrap_or(Value::Null)
        };
        compare_schema("openAPIV3Schema", &schema(r), &schema(g), diffs);
    }
}

fn differences(kind: ApiKind) -> Vec<String> {
    let mut diffs = Vec::new();
    compare_crd(&reference(kind), &generated(kind), &mut diffs);
    diffs
}

fn assert_conforms(kind: ApiKind) {
    let diffs = differences(kind);
    assert!(
        diffs.is_empty(),
        "{kind} CRD differs from the reference {}:\n{}",
        reference_path(kind).display(),
        diffs.join("\n")
    );
}

#[test]
fn nodepool_conforms() {
    assert_conforms(ApiKind::NodePool);
}

#[test]
fn nodeclaim_conforms() {
    assert_conforms(ApiKind::NodeClaim);
}

#[test]
fn ec2nodeclass_conforms() {
    assert_conforms(ApiKind::EC2NodeClass);
}

/// The comparison itself finds each kind of difference.
#[test]
fn comparison_reports_differences() {
    let reference = reference(ApiKind::NodePool);
    let mut changed = reference.clone();
    let spec = changed
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
        .expect("spec schema");
    spec["properties"]["weight"]["maximum"] = 99.into();
    spec["properties"]["template"]["properties"]["spec"]["properties"]
        .as_object_mut()
        .expect("template spec properties")
        .remove("taints");
    spec["properties"]["extra"] = serde_json::json!({"type": "string"});
    spec["x-kubernetes-validations"][0]["message"] = "changed".into();
    spec["required"] = serde_json::json!(["template", "weight"]);
    changed["spec"]["names"]["shortNames"] = serde_json::json!(["np"]);

    let mut diffs = Vec::new();
    compare_crd(&reference, &changed, &mut diffs);
    let expected = [
        "openAPIV3Schema.spec.weight: maximum: reference 100 != generated 99",
        "openAPIV3Schema.spec.template.spec.taints: missing in generated CRD",
        "openAPIV3Schema.spec.extra: extra in generated CRD",
        "openAPIV3Schema.spec: CEL rule missing: \"has(self.replicas) == has(oldSelf.replicas)\"",
        "openAPIV3Schema.spec: required:",
        "/spec/names:",
    ];
    for line in expected {
        assert!(
            diffs.iter().any(|d| d.starts_with(line)),
            "{line} not in {diffs:#?}"
        );
    }
    assert_eq!(diffs.len(), expected.len() + 1, "{diffs:#?}"); // + the extra CEL rule
}

/// The whole NodeOverlay CRD (schema, CEL rules, names, scope, printer
/// columns, status subresource) equals the v1.14.1 reference.
#[test]
fn nodeoverlay_conforms() {
    assert_conforms(ApiKind::NodeOverlay);
}

/// The CapacityBuffer CRD equals Karpenter v1.14.1's
/// `pkg/apis/crds/autoscaling.x-k8s.io_capacitybuffers.yaml`, in the
/// reference directory beside the others.
#[test]
fn capacitybuffer_conforms() {
    let reference = reference(ApiKind::CapacityBuffer);
    let mut diffs = Vec::new();
    compare_crd(&reference, &generated(ApiKind::CapacityBuffer), &mut diffs);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}
