//! The CustomResourceDefinitions of dovetail's kinds, generated from the Rust
//! types, and their checked-in copies under `crds/`.
//!
//! `kube`'s derive produces the schema; [`crd`] then brings it to the shape
//! controller-gen writes for Karpenter: no `nullable`/`title` keywords (the
//! reference has none; an omitted optional field is simply absent), the
//! `apiVersion`/`kind`/`metadata` root properties, and the `listKind` name.
//!
//! Files are named `<group>_<plural>.yaml` like controller-gen's output, each
//! one YAML document starting with `---`.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::{ApiKind, CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};

/// The command that regenerates the checked-in CRDs.
pub const REGENERATE_HINT: &str =
    "run `dovetail crds --out-dir crds` or `DOVETAIL_BLESS=1 cargo test --lib api::` to regenerate";

/// The CRD of one kind.
pub fn crd(kind: ApiKind) -> CustomResourceDefinition {
    let mut crd = match kind {
        ApiKind::NodePool => NodePool::crd(),
        ApiKind::NodeClaim => NodeClaim::crd(),
        ApiKind::EC2NodeClass => EC2NodeClass::crd(),
        ApiKind::NodeOverlay => NodeOverlay::crd(),
        ApiKind::CapacityBuffer => CapacityBuffer::crd(),
    };
    crd.spec.names.list_kind = Some(format!("{}List", kind.kind()));
    for version in &mut crd.spec.versions {
        if let Some(validation) = &mut version.schema
            && let Some(schema) = validation.open_api_v3_schema.take()
        {
            validation.open_api_v3_schema = Some(finish_schema(kind, schema));
        }
    }
    crd
}

/// The `openAPIV3Schema` of a kind's CRD as JSON, the form CEL validation
/// (`kube::core::cel::validate`) and schema defaulting take.
pub fn openapi_schema(kind: ApiKind) -> Value {
    let crd = crd(kind);
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|v| v.open_api_v3_schema.as_ref())
        .expect("every generated CRD has a schema");
    serde_json::to_value(schema).expect("a schema serialises to JSON")
}

/// The CRDs of all kinds, in a stable order: nodepools, nodeclaims,
/// ec2nodeclasses, nodeoverlays, capacitybuffers.
pub fn crds() -> Vec<CustomResourceDefinition> {
    ApiKind::ALL.into_iter().map(crd).collect()
}

/// The file name of a kind's CRD under `crds/`.
pub fn crd_file_name(kind: ApiKind) -> String {
    format!("{}_{}.yaml", kind.group(), kind.plural())
}

/// One CRD as a YAML document starting with `---`.
pub fn crd_yaml(kind: ApiKind) -> String {
    let mut value = serde_json::to_value(crd(kind)).expect("a CRD serialises to JSON");
    integral_numbers(&mut value);
    let yaml = serde_saphyr::to_string(&value).expect("a CRD serialises to YAML");
    format!("---\n{yaml}")
}

/// All CRDs as one multi-document YAML stream.
pub fn crds_yaml() -> String {
    ApiKind::ALL.into_iter().map(crd_yaml).collect()
}

/// The checked-in CRD files: `(file name, contents)` pairs.
pub fn crd_files() -> Vec<(String, String)> {
    ApiKind::ALL
        .into_iter()
        .map(|kind| (crd_file_name(kind), crd_yaml(kind)))
        .collect()
}

/// Writes the CRD files into `dir`, creating it if needed; never
/// through a symlink (see [`crate::fsutil::write_files_into`]).
pub fn write_crds(dir: &Path) -> Result<(), crate::fsutil::WriteError> {
    crate::fsutil::write_files_into(dir, crd_files())
}

/// Applies the controller-gen conventions to a derived root schema.
fn finish_schema(kind: ApiKind, schema: JSONSchemaProps) -> JSONSchemaProps {
    let mut value = serde_json::to_value(schema).expect("a schema serialises to JSON");
    if let Some(root) = value.as_object_mut() {
        // The root's title is the Rust type name.
        root.remove("title");
    }
    strip_keywords(&mut value);
    if let Some(root) = value.as_object_mut() {
        if let Some(Value::Object(properties)) = root.get_mut("properties") {
            properties.insert(
                "apiVersion".into(),
                type_meta_schema(API_VERSION_DESCRIPTION),
            );
            properties.insert("kind".into(), type_meta_schema(KIND_DESCRIPTION));
            properties.insert("metadata".into(), json!({"type": "object"}));
        }
        // Karpenter's EC2NodeClass CRD does not mark `spec` required at the root.
        if kind == ApiKind::EC2NodeClass {
            root.remove("required");
        }
    }
    serde_json::from_value(value).expect("the finished schema is a JSONSchemaProps")
}

/// Removes what controller-gen never writes from a schema and its
/// subschemas: `nullable` and the `null` kube adds to the enum of an
/// optional field (an omitted field is absent, not null), and `title`
/// (folded back into the description). Also
/// restores the `anyOf: [integer, string]` of int-or-string values, whose
/// branch types kube's structural rewrite drops.
fn strip_keywords(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if object.remove("nullable").is_some()
        && let Some(Value::Array(values)) = object.get_mut("enum")
    {
        values.retain(|v| !v.is_null());
    }
    // schemars splits a doc comment's first paragraph off as the title;
    // controller-gen keeps the whole comment as the description.
    if let Some(Value::String(title)) = object.remove("title") {
        let description = match object.get("description").and_then(Value::as_str) {
            Some(rest) => format!("{title}\n\n{rest}"),
            None => title,
        };
        object.insert("description".into(), description.into());
    }
    if object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        && object.contains_key("anyOf")
    {
        object.insert(
            "anyOf".into(),
            json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    for_each_subschema(object, strip_keywords);
}

/// Writes integral floating-point numbers as integers: `JSONSchemaProps`
/// holds `minimum`/`maximum` as `f64`, controller-gen writes `100`, not `100.0`.
fn integral_numbers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n
                .as_f64()
                .filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 2f64.powi(53))
            {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_numbers),
        Value::Object(map) => map.values_mut().for_each(integral_numbers),
        _ => {}
    }
}

/// Calls `f` on every direct subschema of a schema object (not on default
/// values or other data).
pub(crate) fn for_each_subschema(
    object: &mut serde_json::Map<String, Value>,
    mut f: impl FnMut(&mut Value),
) {
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        properties.values_mut().for_each(&mut f);
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(sub @ Value::Object(_)) = object.get_mut(key) {
            f(sub);
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(subs)) = object.get_mut(key) {
            subs.iter_mut().for_each(&mut f);
        }
    }
}

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object.\nServers should convert recognized schemas to the latest internal value, and\nmay reject unrecognized values.\nMore info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents.\nServers may infer this from the endpoint the client submits requests to.\nCannot be updated.\nIn CamelCase.\nMore info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

fn type_meta_schema(description: &str) -> Value {
    json!({"description": description, "type": "string"})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in CRDs under `crds/` are what the types generate.
    /// `DOVETAIL_BLESS=1` rewrites them instead of failing.
    #[test]
    fn checked_in_crds_are_up_to_date() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
        if std::env::var_os("DOVETAIL_BLESS").is_some_and(|v| v == "1") {
            write_crds(&dir).expect("write crds/");
        }
        let mut stale = Vec::new();
        for (name, generated) in crd_files() {
            let checked_in = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            if checked_in != generated {
                stale.push(name);
            }
        }
        assert!(
            stale.is_empty(),
            "crds/ is out of date ({}): {REGENERATE_HINT}",
            stale.join(", ")
        );
    }

    #[test]
    fn crds_yaml_is_every_file_in_order() {
        let yaml = crds_yaml();
        let docs: Vec<&str> = yaml.split("---\n").filter(|d| !d.is_empty()).collect();
        assert_eq!(docs.len(), ApiKind::ALL.len());
        for (doc, kind) in docs.iter().zip(ApiKind::ALL) {
            assert!(
                doc.contains(&format!("name: {}.{}", kind.plural(), kind.group())),
                "{doc}"
            );
        }
    }

    #[test]
    fn crds_round_trip_through_yaml() {
        for kind in ApiKind::ALL {
            let yaml = crd_yaml(kind);
            let parsed: CustomResourceDefinition =
                serde_saphyr::from_str(yaml.trim_start_matches("---\n")).expect("parse CRD YAML");
            assert_eq!(parsed, crd(kind), "{kind}");
        }
    }

    #[test]
    fn write_crds_writes_every_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_crds(dir.path()).expect("write");
        for (name, yaml) in crd_files() {
            assert_eq!(
                std::fs::read_to_string(dir.path().join(name)).expect("read"),
                yaml
            );
        }
    }

    /// A checked-out repository may hold a symlink where a CRD file goes
    /// (`crds/karpenter.sh_nodepools.yaml -> ~/.bashrc`); `crds --out-dir`
    /// refuses it and leaves the target alone. Today's code followed it.
    #[cfg(unix)]
    #[test]
    fn write_crds_never_writes_through_a_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = dir.path().join("crds");
        std::fs::create_dir(&out).unwrap();
        let (name, _) = &crd_files()[1];
        std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
        let err = write_crds(&out).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &linked).unwrap();
        std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
        assert!(write_crds(&linked).is_err());
        assert_eq!(
            std::fs::read_dir(dir.path().join("elsewhere"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn generated_schema_has_no_openapi_leftovers() {
        for crd in crds() {
            let schema = serde_json::to_string(&crd.spec.versions[0].schema).expect("json");
            assert!(!schema.contains("\"nullable\""), "{}", crd.spec.names.kind);
            assert!(!schema.contains("\"title\""), "{}", crd.spec.names.kind);
            assert!(!schema.contains("$ref"), "{}", crd.spec.names.kind);
        }
    }
}
