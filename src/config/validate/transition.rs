//! The reference CRDs' transition rules (CEL rules that use `oldSelf`),
//! checked natively.
//!
//! The API server evaluates these on an update, with the stored object as
//! `oldSelf`, so they cannot be checked by `validate` (which sees one
//! revision). `dovetail diff` checks them from the `--from` to the `--to`
//! revision, and sync from the live object to the one being applied.
//!
//! The rules of Karpenter v1.14.1 (EC2NodeClass has none):
//!
//! | Kind | Where | Rule | Message |
//! |---|---|---|---|
//! | NodePool | `spec.template.spec.nodeClassRef` | `self.group == oldSelf.group` | nodeClassRef.group is immutable |
//! | NodePool | `spec.template.spec.nodeClassRef` | `self.kind == oldSelf.kind` | nodeClassRef.kind is immutable |
//! | NodePool | `spec` | `has(self.replicas) == has(oldSelf.replicas)` | Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes |
//! | NodeClaim | `spec` | `self == oldSelf` | spec is immutable |
//!
//! As in the API server, a rule is evaluated only where the object it is
//! attached to exists on both sides, and both objects should have their
//! defaults applied first (the API server defaults before it validates), so
//! that spelling out a default is not a transition. A unit test checks the
//! verdicts against kube-cel evaluating the reference CRDs.

use serde_json::Value;

use crate::api::ApiKind;
use crate::diag::JsonPath;

pub use super::rules::Finding;

/// The message of the NodePool rule `self.group == oldSelf.group`.
pub const NODECLASSREF_GROUP_IMMUTABLE: &str = "nodeClassRef.group is immutable";
/// The message of the NodePool rule `self.kind == oldSelf.kind`.
pub const NODECLASSREF_KIND_IMMUTABLE: &str = "nodeClassRef.kind is immutable";
/// The message of the NodePool rule `has(self.replicas) == has(oldSelf.replicas)`.
pub const NODEPOOL_MODE_TRANSITION: &str = "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes";
/// The message of the NodeClaim rule `self == oldSelf` on `spec`.
pub const NODECLAIM_SPEC_IMMUTABLE: &str = "spec is immutable";

/// The transition rules violated by updating `old` to `new`, both objects of
/// `kind` (as JSON, with defaults applied). Findings are at paths of `new`.
pub fn check(kind: ApiKind, old: &Value, new: &Value) -> Vec<Finding> {
    match kind {
        ApiKind::NodePool => nodepool(old, new),
        ApiKind::NodeClaim => nodeclaim(old, new),
        ApiKind::EC2NodeClass | ApiKind::NodeOverlay | ApiKind::CapacityBuffer => Vec::new(),
    }
}

/// How to make the change another way, for a finding of [`check`].
pub fn hint(finding: &Finding) -> Option<&'static str> {
    match finding.message.as_str() {
        NODECLASSREF_GROUP_IMMUTABLE | NODECLASSREF_KIND_IMMUTABLE => Some(
            "the API server rejects this update; create a NodePool under a new name with the new nodeClassRef and delete this one",
        ),
        NODEPOOL_MODE_TRANSITION => Some(
            "the API server rejects this update; create a NodePool under a new name and delete this one",
        ),
        NODECLAIM_SPEC_IMMUTABLE => {
            Some("NodeClaims are created by the controller; delete this one instead of changing it")
        }
        _ => None,
    }
}

/// CEL's `has(x.f)`: the field is present (a JSON null counts as absent).
fn has(v: &Value, field: &str) -> bool {
    v.get(field).is_some_and(|f| !f.is_null())
}

/// The object at `path` on both sides, when both are objects: where a rule
/// attached at `path` is evaluated.
fn both<'a>(old: &'a Value, new: &'a Value, pointer: &str) -> Option<(&'a Value, &'a Value)> {
    let old = old.pointer(pointer).filter(|v| v.is_object())?;
    let new = new.pointer(pointer).filter(|v| v.is_object())?;
    Some((old, new))
}

fn nodepool(old: &Value, new: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some((old_spec, new_spec)) = both(old, new, "/spec")
        && has(old_spec, "replicas") != has(new_spec, "replicas")
    {
        out.push(Finding {
            path: JsonPath::parse("spec.replicas"),
            message: NODEPOOL_MODE_TRANSITION.to_string(),
        });
    }
    if let Some((old_ref, new_ref)) = both(old, new, "/spec/template/spec/nodeClassRef") {
        let at = JsonPath::parse("spec.template.spec.nodeClassRef");
        for (field, message) in [
            ("group", NODECLASSREF_GROUP_IMMUTABLE),
            ("kind", NODECLASSREF_KIND_IMMUTABLE),
        ] {
            if old_ref.get(field) != new_ref.get(field) {
                out.push(Finding {
                    path: at.key(field),
                    message: message.to_string(),
                });
            }
        }
    }
    out
}

fn nodeclaim(old: &Value, new: &Value) -> Vec<Finding> {
    match both(old, new, "/spec") {
        Some((old_spec, new_spec)) if old_spec != new_spec => vec![Finding {
            path: JsonPath::parse("spec"),
            message: NODECLAIM_SPEC_IMMUTABLE.to_string(),
        }],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    use kube::core::cel::{CompiledSchema, Validator, compile_schema};
    use serde_json::json;

    use super::*;
    use crate::api::{EC2NodeClass, NodeClaim, NodePool};

    fn json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).expect("serialise")
    }

    fn messages(findings: &[Finding]) -> Vec<(String, &str)> {
        findings
            .iter()
            .map(|f| (f.path.to_string(), f.message.as_str()))
            .collect()
    }

    fn pool() -> NodePool {
        let mut pool = NodePool::test("a");
        pool.apply_defaults();
        pool
    }

    #[test]
    fn nodeclassref_group_is_immutable() {
        let old = pool();
        let mut new = old.clone();
        new.spec.template.spec.node_class_ref.group = "example.com".to_string();
        assert_eq!(
            messages(&check(ApiKind::NodePool, &json(&old), &json(&new))),
            [(
                "spec.template.spec.nodeClassRef.group".to_string(),
                NODECLASSREF_GROUP_IMMUTABLE
            )]
        );
    }

    #[test]
    fn nodeclassref_kind_is_immutable() {
        let old = pool();
        let mut new = old.clone();
        new.spec.template.spec.node_class_ref.kind = "OtherNodeClass".to_string();
        assert_eq!(
            messages(&check(ApiKind::NodePool, &json(&old), &json(&new))),
            [(
                "spec.template.spec.nodeClassRef.kind".to_string(),
                NODECLASSREF_KIND_IMMUTABLE
            )]
        );
    }

    #[test]
    fn nodeclassref_name_may_change() {
        let old = pool();
        let mut new = old.clone();
        new.spec.template.spec.node_class_ref.name = "other".to_string();
        assert_eq!(
            check(ApiKind::NodePool, &json(&old), &json(&new)),
            Vec::new()
        );
    }

    #[test]
    fn nodepool_cannot_switch_between_static_and_dynamic() {
        let dynamic = pool();
        let mut fixed = dynamic.clone();
        fixed.spec.replicas = Some(3);
        let expected = [("spec.replicas".to_string(), NODEPOOL_MODE_TRANSITION)];
        let (d, s) = (json(&dynamic), json(&fixed));
        assert_eq!(messages(&check(ApiKind::NodePool, &d, &s)), expected);
        assert_eq!(messages(&check(ApiKind::NodePool, &s, &d)), expected);
        // A static NodePool may be scaled.
        let mut scaled = fixed.clone();
        scaled.spec.replicas = Some(5);
        assert_eq!(check(ApiKind::NodePool, &s, &json(&scaled)), Vec::new());
        // `replicas: null` is unset, as CEL's has() sees it.
        let mut null_replicas = d.clone();
        null_replicas["spec"]["replicas"] = Value::Null;
        assert_eq!(check(ApiKind::NodePool, &d, &null_replicas), Vec::new());
    }

    #[test]
    fn nodeclaim_spec_is_immutable() {
        let mut old = NodeClaim::test("a");
        old.apply_defaults();
        let mut new = old.clone();
        new.spec.expire_after = Some("1h".to_string());
        assert_eq!(
            messages(&check(ApiKind::NodeClaim, &json(&old), &json(&new))),
            [("spec".to_string(), NODECLAIM_SPEC_IMMUTABLE)]
        );
        // Metadata is not part of the rule.
        let mut labelled = old.clone();
        labelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert_eq!(
            check(ApiKind::NodeClaim, &json(&old), &json(&labelled)),
            Vec::new()
        );
    }

    #[test]
    fn ec2nodeclass_has_no_transition_rules() {
        let old = json(&EC2NodeClass::test("a"));
        let new = json!({"spec": {"role": "other"}});
        assert_eq!(check(ApiKind::EC2NodeClass, &old, &new), Vec::new());
    }

    #[test]
    fn rules_are_skipped_where_the_old_object_lacks_the_field() {
        let new = json(&pool());
        assert_eq!(
            check(ApiKind::NodePool, &json!({"metadata": {}}), &new),
            Vec::new()
        );
        assert_eq!(
            check(ApiKind::NodePool, &json!({"spec": {"replicas": 1}}), &new),
            messages_to_findings(&[("spec.replicas", NODEPOOL_MODE_TRANSITION)])
        );
    }

    fn messages_to_findings(expected: &[(&str, &str)]) -> Vec<Finding> {
        expected
            .iter()
            .map(|(p, m)| Finding {
                path: JsonPath::parse(p),
                message: m.to_string(),
            })
            .collect()
    }

    // --- agreement with kube-cel evaluating the reference CRDs ---------------

    /// The reference CRDs, found in `shared/reference` next to the checkout
    /// or next to the directory that holds it (git worktrees).
    fn reference_dir() -> PathBuf {
        const DIR: &str = "shared/reference/karpenter-v1.14.1-crds";
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|a| a.join(DIR))
            .find(|d| d.is_dir())
            .unwrap_or_else(|| panic!("{DIR} not found above {}", env!("CARGO_MANIFEST_DIR")))
    }

    fn reference(kind: ApiKind) -> &'static CompiledSchema {
        fn load(file: &str) -> CompiledSchema {
            let path = reference_dir().join(file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let crd: Value = serde_saphyr::from_str(&text).expect("reference CRD parses");
            compile_schema(&crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
        }
        static NODEPOOL: OnceLock<CompiledSchema> = OnceLock::new();
        static NODECLAIM: OnceLock<CompiledSchema> = OnceLock::new();
        static EC2NODECLASS: OnceLock<CompiledSchema> = OnceLock::new();
        match kind {
            ApiKind::NodePool => NODEPOOL.get_or_init(|| load("karpenter.sh_nodepools.yaml")),
            ApiKind::NodeClaim => NODECLAIM.get_or_init(|| load("karpenter.sh_nodeclaims.yaml")),
            ApiKind::EC2NodeClass => {
                EC2NODECLASS.get_or_init(|| load("karpenter.k8s.aws_ec2nodeclasses.yaml"))
            }
            ApiKind::NodeOverlay | ApiKind::CapacityBuffer => {
                unreachable!("{kind} has no transition rules")
            }
        }
    }

    /// kube-cel's transition-rule failures for `old` → `new`: the failures
    /// with an old object that do not occur without one.
    fn kube_cel(kind: ApiKind, old: &Value, new: &Value) -> Vec<(String, String)> {
        let errors = |old: Option<&Value>| -> Vec<(String, String)> {
            match Validator::new().validate_compiled(reference(kind), new, old) {
                Ok(()) => Vec::new(),
                Err(errors) => errors
                    .into_vec()
                    .into_iter()
                    .map(|e| (e.field_path, e.message))
                    .collect(),
            }
        };
        let without_old = errors(None);
        let mut with_old = errors(Some(old));
        with_old.retain(|e| !without_old.contains(e));
        with_old.sort();
        with_old
    }

    /// dovetail's findings as kube-cel reports them: at the path the rule is
    /// attached to.
    fn native(kind: ApiKind, old: &Value, new: &Value) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = check(kind, old, new)
            .into_iter()
            .map(|f| {
                let rule_path = match f.message.as_str() {
                    NODECLASSREF_GROUP_IMMUTABLE | NODECLASSREF_KIND_IMMUTABLE => {
                        "spec.template.spec.nodeClassRef"
                    }
                    _ => "spec",
                };
                (rule_path.to_string(), f.message)
            })
            .collect();
        out.sort();
        out
    }

    fn nodepool_variants() -> Vec<Value> {
        let mut out = Vec::new();
        for group in ["karpenter.k8s.aws", "example.com"] {
            for kind in ["EC2NodeClass", "OtherNodeClass"] {
                for replicas in [None, Some(0), Some(2)] {
                    for name in ["default", "other"] {
                        let mut pool = pool();
                        let r = &mut pool.spec.template.spec.node_class_ref;
                        (r.group, r.kind, r.name) = (group.into(), kind.into(), name.into());
                        pool.spec.replicas = replicas;
                        out.push(json(&pool));
                    }
                }
            }
        }
        out
    }

    fn nodeclaim_variants() -> Vec<Value> {
        let base = NodeClaim::test("a");
        let mut expire = base.clone();
        expire.spec.expire_after = Some("1h".to_string());
        let mut class = base.clone();
        class.spec.node_class_ref.name = "other".to_string();
        let mut labelled = base.clone();
        labelled.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        [base, expire, class, labelled]
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.apply_defaults();
                json(&c)
            })
            .collect()
    }

    #[test]
    fn verdicts_agree_with_kube_cel_on_the_reference_crds() {
        let cases = [
            (ApiKind::NodePool, nodepool_variants()),
            (ApiKind::NodeClaim, nodeclaim_variants()),
            (
                ApiKind::EC2NodeClass,
                vec![json(&EC2NodeClass::test("a")), {
                    let mut c = EC2NodeClass::test("a");
                    c.spec.role = Some("other".to_string());
                    json(&c)
                }],
            ),
        ];
        let mut violations = 0;
        for (kind, variants) in &cases {
            for old in variants {
                for new in variants {
                    let expected = kube_cel(*kind, old, new);
                    assert_eq!(native(*kind, old, new), expected, "{kind}: {old} -> {new}");
                    violations += usize::from(!expected.is_empty());
                }
            }
        }
        // The generated pairs exercise every rule, not only agreement on "ok".
        assert!(violations > 100, "{violations}");
    }
}
