//! The drift hashes of NodePools and EC2NodeClasses.
//!
//! A hash covers the fields whose change replaces a node, in a canonical
//! form that is the same for every way of writing the same object:
//! - the API server's defaults are applied first, so a default spelled out
//!   is no change;
//! - empty values (`null`, `""`, `[]`, `{}`) are dropped, so adding a field
//!   at its empty value is no change (booleans and numbers are values:
//!   `associatePublicIPAddress: false` is not the same as leaving it unset);
//! - every list is a set: its items are sorted and deduplicated;
//! - map keys are sorted.
//!
//! The canonical form is encoded as compact JSON and hashed with FNV-1a
//! (64 bits), which is defined byte by byte, so a hash is the same on every
//! run and platform. The encoding or the set of fields may only change with
//! a new hash version ([`NODEPOOL_HASH_VERSION`],
//! [`EC2NODECLASS_HASH_VERSION`]): a NodeClaim stamped under another version
//! is re-stamped, never drifted.

use std::collections::BTreeMap;
use std::hash::Hasher;

use serde_json::{Map, Value};

use crate::api::{EC2NodeClass, NodePool};

/// The version of [`nodepool_hash`]; bump it when its fields or encoding change.
pub const NODEPOOL_HASH_VERSION: &str = "v1";
/// The version of [`ec2nodeclass_hash`]; bump it when its fields or encoding change.
/// v2: `placementGroupSelector` hashed and `ipPrefixCount` not, as in
/// Karpenter v1.14.1.
pub const EC2NODECLASS_HASH_VERSION: &str = "v2";

/// The EC2NodeClass spec fields that are not hashed (Karpenter v1.14.1's
/// `hash:"ignore"`): selector terms, whose effect is what they resolve to
/// (checked separately), `ipPrefixCount`, and `amiFamily`, which is hashed
/// as the resolved family instead. `placementGroupSelector` is hashed: a
/// new selector is `NodeClassDrift`, and a node whose group is not the one
/// its class resolves to is `PlacementGroupDrift`.
const EC2NODECLASS_UNHASHED: [&str; 6] = [
    "amiFamily",
    "amiSelectorTerms",
    "capacityReservationSelectorTerms",
    "ipPrefixCount",
    "securityGroupSelectorTerms",
    "subnetSelectorTerms",
];

/// The key under which the resolved AMI family is hashed.
pub const RESOLVED_AMI_FAMILY: &str = "resolvedAmiFamily";

/// The hashed fields of a NodePool (`spec.template`, requirements excluded)
/// by path, canonical, empty ones left out.
pub fn nodepool_fields(pool: &NodePool) -> BTreeMap<String, Value> {
    let mut pool = pool.clone();
    pool.apply_defaults();
    let template = &pool.spec.template;
    let metadata = template.metadata.clone().unwrap_or_default();
    let spec = &template.spec;
    let fields = [
        ("metadata.labels", to_value(&metadata.labels)),
        ("metadata.annotations", to_value(&metadata.annotations)),
        ("spec.taints", to_value(&spec.taints)),
        ("spec.startupTaints", to_value(&spec.startup_taints)),
        ("spec.nodeClassRef", to_value(&spec.node_class_ref)),
        ("spec.expireAfter", to_value(&spec.expire_after)),
        (
            "spec.terminationGracePeriod",
            to_value(&spec.termination_grace_period),
        ),
    ];
    fields
        .into_iter()
        .filter_map(|(path, value)| canonical(&value).map(|v| (path.to_string(), v)))
        .collect()
}

/// The hashed fields of an EC2NodeClass (the spec but its selector terms,
/// plus the resolved AMI family) by path, canonical, empty ones left out.
pub fn ec2nodeclass_fields(class: &EC2NodeClass) -> BTreeMap<String, Value> {
    let mut class = class.clone();
    class.apply_defaults();
    let mut fields = BTreeMap::new();
    if let Value::Object(spec) = to_value(&class.spec) {
        for (key, value) in spec {
            if EC2NODECLASS_UNHASHED.contains(&key.as_str()) {
                continue;
            }
            if let Some(v) = canonical(&value) {
                fields.insert(format!("spec.{key}"), v);
            }
        }
    }
    if let Some(family) = class.resolved_ami_family() {
        fields.insert(
            RESOLVED_AMI_FAMILY.to_string(),
            Value::String(format!("{family:?}")),
        );
    }
    fields
}

/// The drift hash of a NodePool (version [`NODEPOOL_HASH_VERSION`]).
pub fn nodepool_hash(pool: &NodePool) -> String {
    hash_fields("NodePool", NODEPOOL_HASH_VERSION, &nodepool_fields(pool))
}

/// The drift hash of an EC2NodeClass (version [`EC2NODECLASS_HASH_VERSION`]).
pub fn ec2nodeclass_hash(class: &EC2NodeClass) -> String {
    hash_fields(
        "EC2NodeClass",
        EC2NODECLASS_HASH_VERSION,
        &ec2nodeclass_fields(class),
    )
}

/// The AMI selector terms in canonical form (a set), for comparing two
/// selections; `None` when there are none.
pub fn ami_selection(class: &EC2NodeClass) -> Option<Value> {
    canonical(&to_value(&class.spec.ami_selector_terms))
}

/// The paths whose canonical values differ between two field maps.
pub fn changed_fields(old: &BTreeMap<String, Value>, new: &BTreeMap<String, Value>) -> Vec<String> {
    let mut paths: Vec<&String> = old.keys().chain(new.keys()).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter(|p| old.get(*p) != new.get(*p))
        .cloned()
        .collect()
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    // The API types serialise to JSON infallibly (string keys, no non-finite
    // floats); should that ever fail, the field hashes as absent.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// 16 hex digits of FNV-1a 64 over `kind`, `version` and the encoded fields.
fn hash_fields(kind: &str, version: &str, fields: &BTreeMap<String, Value>) -> String {
    let mut out = String::new();
    out.push_str(kind);
    out.push('/');
    out.push_str(version);
    out.push('\n');
    let object: Map<String, Value> = fields.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    encode(&Value::Object(object), &mut out);
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(out.as_bytes());
    format!("{:016x}", hasher.finish())
}

/// The canonical form of a value: empty values dropped (`None` when the
/// whole value is empty), lists as sorted, deduplicated sets.
pub fn canonical(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) => {
            let mut keyed: Vec<(String, Value)> = items
                .iter()
                .filter_map(canonical)
                .map(|v| {
                    let mut key = String::new();
                    encode(&v, &mut key);
                    (key, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            keyed.dedup_by(|a, b| a.0 == b.0);
            (!keyed.is_empty()).then(|| Value::Array(keyed.into_iter().map(|(_, v)| v).collect()))
        }
        Value::Object(map) => {
            let kept: Map<String, Value> = map
                .iter()
                .filter_map(|(k, v)| canonical(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other.clone()),
    }
}

/// Compact JSON with map keys in sorted order, whatever order the map keeps.
fn encode(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                encode(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                encode(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Taint, TaintEffect};
    use serde_json::json;

    fn pool_from(spec_template: Value) -> NodePool {
        let mut doc = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
            }}}
        });
        if let (Some(t), Some(extra)) = (
            doc["spec"]["template"].as_object_mut(),
            spec_template.as_object(),
        ) {
            for (k, v) in extra {
                match (t.get_mut(k), v) {
                    (Some(Value::Object(have)), Value::Object(add)) => {
                        have.extend(add.clone());
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        serde_json::from_value(doc).unwrap()
    }

    fn class_from(extra: Value) -> EC2NodeClass {
        let mut class = EC2NodeClass::test("default");
        let mut value = serde_json::to_value(&class).unwrap();
        if let (Some(spec), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        class = serde_json::from_value(value).unwrap();
        class
    }

    #[test]
    fn the_hash_is_stable_across_runs_and_platforms() {
        // A change to this value changes every stamped NodeClaim's hash:
        // only acceptable together with a new NODEPOOL_HASH_VERSION.
        let pool = NodePool::test("general");
        assert_eq!(nodepool_hash(&pool), nodepool_hash(&pool.clone()));
        let mut fnv = fnv::FnvHasher::default();
        fnv.write(b"a");
        assert_eq!(fnv.finish(), 0xaf63dc4c8601ec8c, "FNV-1a 64 of \"a\"");
        assert_eq!(nodepool_hash(&pool), "1dfe6d0f0afdb140");
    }

    #[test]
    fn adding_a_field_at_its_empty_value_changes_nothing() {
        let bare = nodepool_hash(&pool_from(json!({})));
        for empty in [
            json!({"spec": {"taints": []}}),
            json!({"spec": {"startupTaints": []}}),
            json!({"metadata": {}}),
            json!({"metadata": {"labels": {}, "annotations": {}}}),
            json!({"spec": {"terminationGracePeriod": null}}),
        ] {
            assert_eq!(nodepool_hash(&pool_from(empty.clone())), bare, "{empty}");
        }
        let class = ec2nodeclass_hash(&class_from(json!({})));
        for empty in [
            json!({"tags": {}}),
            json!({"blockDeviceMappings": []}),
            json!({"userData": ""}),
            json!({"kubelet": {}}),
            json!({"kubelet": {"clusterDNS": []}}),
        ] {
            assert_eq!(
                ec2nodeclass_hash(&class_from(empty.clone())),
                class,
                "{empty}"
            );
        }
    }

    #[test]
    fn list_order_does_not_matter() {
        let a = pool_from(json!({"spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"}, {"key": "b", "value": "x", "effect": "NoExecute"}
        ]}}));
        let b = pool_from(json!({"spec": {"taints": [
            {"effect": "NoExecute", "value": "x", "key": "b"}, {"key": "a", "effect": "NoSchedule"}
        ]}}));
        assert_eq!(nodepool_hash(&a), nodepool_hash(&b));
        let dns = |servers: Value| class_from(json!({"kubelet": {"clusterDNS": servers}}));
        assert_eq!(
            ec2nodeclass_hash(&dns(json!(["10.0.0.10", "10.0.0.11"]))),
            ec2nodeclass_hash(&dns(json!(["10.0.0.11", "10.0.0.10"])))
        );
    }

    #[test]
    fn defaults_spelled_out_do_not_change_the_hash() {
        let bare = pool_from(json!({}));
        let spelled = pool_from(json!({"spec": {"expireAfter": "720h"}}));
        assert_eq!(nodepool_hash(&bare), nodepool_hash(&spelled));
        let class = class_from(json!({"metadataOptions": {
            "httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1, "httpTokens": "required"
        }}));
        assert_eq!(
            ec2nodeclass_hash(&class),
            ec2nodeclass_hash(&class_from(json!({})))
        );
        // The family an alias implies, spelled out, is the same family.
        let explicit = class_from(json!({"amiFamily": "AL2023"}));
        assert_eq!(
            ec2nodeclass_hash(&explicit),
            ec2nodeclass_hash(&class_from(json!({})))
        );
    }

    #[test]
    fn hashed_fields_change_the_hash_and_requirements_do_not() {
        let bare = pool_from(json!({}));
        let mut tainted = bare.clone();
        tainted.spec.template.spec.taints = Some(vec![Taint::new(
            "dedicated",
            Some("gpu"),
            TaintEffect::NoSchedule,
        )]);
        assert_ne!(nodepool_hash(&bare), nodepool_hash(&tainted));
        assert_eq!(
            changed_fields(&nodepool_fields(&bare), &nodepool_fields(&tainted)),
            ["spec.taints"]
        );
        let mut labelled = bare.clone();
        labelled.spec.template.metadata = Some(crate::api::nodepool::NodeClaimTemplateMetadata {
            labels: Some(BTreeMap::from([("team".into(), "a".into())])),
            annotations: None,
        });
        assert_ne!(nodepool_hash(&bare), nodepool_hash(&labelled));
        let mut expiring = bare.clone();
        expiring.spec.template.spec.expire_after = Some("24h".into());
        assert_ne!(nodepool_hash(&bare), nodepool_hash(&expiring));

        let mut required = bare.clone();
        required.spec.template.spec.requirements[0].values = Some(vec!["spot".into()]);
        assert_eq!(nodepool_hash(&bare), nodepool_hash(&required));
        // Nor do limits, weight or the disruption policy.
        let limited = bare.clone().with_limits(&[("cpu", "10")]).with_weight(5);
        assert_eq!(nodepool_hash(&bare), nodepool_hash(&limited));
    }

    #[test]
    fn nodeclass_hash_skips_selectors_and_includes_the_resolved_family() {
        let base = class_from(json!({}));
        // Karpenter v1.14.1's hash:"ignore" fields.
        let other_subnets = class_from(json!({
            "subnetSelectorTerms": [{"id": "subnet-123"}],
            "securityGroupSelectorTerms": [{"id": "sg-123"}],
            "capacityReservationSelectorTerms": [{"id": "cr-123"}],
            "ipPrefixCount": 2,
            "amiSelectorTerms": [{"alias": "al2023@v20240807"}]
        }));
        assert_eq!(ec2nodeclass_hash(&base), ec2nodeclass_hash(&other_subnets));
        // The placement group selector is hashed (NodeClassDrift).
        let grouped = class_from(json!({"placementGroupSelector": {"name": "pg"}}));
        assert_eq!(
            changed_fields(&ec2nodeclass_fields(&base), &ec2nodeclass_fields(&grouped)),
            ["spec.placementGroupSelector"]
        );
        let bottlerocket =
            class_from(json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}));
        assert_ne!(ec2nodeclass_hash(&base), ec2nodeclass_hash(&bottlerocket));
        assert_eq!(
            changed_fields(
                &ec2nodeclass_fields(&base),
                &ec2nodeclass_fields(&bottlerocket)
            ),
            [RESOLVED_AMI_FAMILY]
        );
        let role = class_from(json!({"role": "OtherRole"}));
        assert_ne!(ec2nodeclass_hash(&base), ec2nodeclass_hash(&role));
        let public = class_from(json!({"associatePublicIPAddress": false}));
        assert_ne!(ec2nodeclass_hash(&base), ec2nodeclass_hash(&public));
        assert_ne!(ami_selection(&base), ami_selection(&other_subnets));
    }

    #[test]
    fn canonical_form_drops_empties_and_sorts_sets() {
        let v = json!({"b": [3, 1, 3, {}], "a": {"x": "", "y": null}, "c": false, "d": 0});
        assert_eq!(
            canonical(&v),
            Some(json!({"b": [1, 3], "c": false, "d": 0}))
        );
        let mut s = String::new();
        encode(&json!({"b": 1, "a": [true, "x"]}), &mut s);
        assert_eq!(s, r#"{"a":[true,"x"],"b":1}"#);
    }
}
