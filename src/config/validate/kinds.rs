//! Which object a document is: one of dovetail's kinds, a retired Karpenter
//! API (with what changed and how to move to v1), or something else that is
//! skipped with a note.

use serde_json::Value;

use crate::api::ApiKind;
use crate::diag::JsonPath;

/// What a document was recognised as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    /// A kind dovetail validates; `previous` when written in a version the
    /// v1.14.1 CRD no longer serves (same schema, a warning).
    Known(ApiKind),
    Previous(ApiKind),
    /// A retired Karpenter API: an error, with the migration findings.
    Retired {
        message: String,
        hint: String,
        /// Specific problems in the old object, each at its own node.
        findings: Vec<(JsonPath, String)>,
    },
    /// A `karpenter.sh` / `karpenter.k8s.aws` kind or version dovetail does not know.
    UnknownKarpenter {
        message: String,
        hint: Option<String>,
    },
    /// A Karpenter kind in a group that does not serve it, or a group one
    /// typo away from a Karpenter group: a warning, with the likely group.
    WrongGroup {
        message: String,
        hint: String,
    },
    /// Any other Kubernetes object: skipped.
    Other {
        api_version: String,
        kind: String,
    },
    /// No `apiVersion` or `kind`.
    NotAnObject {
        missing: &'static str,
    },
}

const KARPENTER_GROUPS: [&str; 2] = ["karpenter.sh", "karpenter.k8s.aws"];

/// Every group a Karpenter v1.14 kind is served in.
const KNOWN_GROUPS: [&str; 3] = ["karpenter.sh", "karpenter.k8s.aws", "autoscaling.x-k8s.io"];

/// The group and version of a Karpenter kind of this name, if there is one.
fn home_of(kind: &str) -> Option<(&'static str, &'static str)> {
    ApiKind::ALL
        .iter()
        .find(|k| k.kind() == kind)
        .map(|k| (k.group(), k.api_version()))
}

/// A document in a group no Karpenter kind is served in, that is likely
/// meant for one: a Karpenter kind name, or a group within two edits of a
/// Karpenter group. `kubectl apply` would fail on it ("no matches for
/// kind"), so it is not silently skipped.
fn wrong_group(api_version: &str, group: &str, kind: &str) -> Option<Classified> {
    if KNOWN_GROUPS.contains(&group) {
        return None;
    }
    if let Some((home, version)) = home_of(kind) {
        return Some(Classified::WrongGroup {
            message: format!(
                "{kind} is served in API group {home}, not {group:?} ({api_version}): kubectl apply would fail with \"no matches for kind\""
            ),
            hint: format!("did you mean apiVersion: {version}?"),
        });
    }
    let (near, distance) = KNOWN_GROUPS
        .iter()
        .map(|g| (*g, crate::diag::edit_distance(g, group)))
        .min_by_key(|(_, d)| *d)?;
    (distance <= 2).then(|| Classified::WrongGroup {
        message: format!(
            "unknown API group {group:?} ({api_version}), close to {near}: kubectl apply would fail with \"no matches for kind\""
        ),
        hint: format!("did you mean API group {near}?"),
    })
}

pub fn classify(doc: &Value) -> Classified {
    let api_version = doc.get("apiVersion").and_then(Value::as_str);
    let kind = doc.get("kind").and_then(Value::as_str);
    let (api_version, kind) = match (api_version, kind) {
        (Some(a), Some(k)) => (a, k),
        (None, _) => {
            return Classified::NotAnObject {
                missing: "apiVersion",
            };
        }
        (_, None) => return Classified::NotAnObject { missing: "kind" },
    };
    for k in ApiKind::ALL {
        if k.api_version() == api_version && k.kind() == kind {
            return Classified::Known(k);
        }
    }
    for k in ApiKind::ALL {
        if k.kind() == kind && k.previous_api_version() == Some(api_version) {
            return Classified::Previous(k);
        }
    }
    match (api_version, kind) {
        ("karpenter.sh/v1beta1", "NodePool") => return retired_nodepool(doc),
        ("karpenter.k8s.aws/v1beta1", "EC2NodeClass") => return retired_ec2nodeclass(doc),
        ("karpenter.sh/v1beta1", "NodeClaim") => {
            return Classified::Retired {
                message: "karpenter.sh/v1beta1 NodeClaim is no longer served".into(),
                hint: "set apiVersion: karpenter.sh/v1; NodeClaims are created by the controller and need not be committed".into(),
                findings: Vec::new(),
            };
        }
        ("karpenter.sh/v1alpha5", "Provisioner") => return retired_provisioner(doc),
        ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => return retired_awsnodetemplate(doc),
        _ => {}
    }
    let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    if let Some(c) = wrong_group(api_version, group, kind) {
        return c;
    }
    if KARPENTER_GROUPS.contains(&group) {
        let same_version: Vec<&str> = ApiKind::ALL
            .iter()
            .filter(|k| k.api_version() == api_version)
            .map(|k| k.kind())
            .collect();
        if let Some(close) = same_version
            .iter()
            .find(|k| k.eq_ignore_ascii_case(kind) || crate::diag::edit_distance(k, kind) <= 2)
        {
            return Classified::UnknownKarpenter {
                message: format!("unknown kind {kind:?} in {api_version}"),
                hint: Some(format!("did you mean kind: {close}?")),
            };
        }
        return Classified::UnknownKarpenter {
            message: format!("{api_version} {kind} is not a supported API"),
            hint: home_of(kind).map(|(_, version)| format!("use apiVersion: {version}")),
        };
    }
    Classified::Other {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
    }
}

fn at(path: &str) -> JsonPath {
    JsonPath::parse(path)
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn retired_nodepool(doc: &Value) -> Classified {
    let mut findings = Vec::new();
    if get(doc, &["spec", "disruption", "consolidationPolicy"]).and_then(Value::as_str)
        == Some("WhenUnderutilized")
    {
        findings.push((
            at("spec.disruption.consolidationPolicy"),
            "WhenUnderutilized became WhenEmptyOrUnderutilized in karpenter.sh/v1".to_string(),
        ));
    }
    if let Some(r) = get(doc, &["spec", "template", "spec", "nodeClassRef"]) {
        let missing: Vec<&str> = ["group", "kind"]
            .into_iter()
            .filter(|k| r.get(k).is_none())
            .collect();
        if !missing.is_empty() {
            findings.push((
                at("spec.template.spec.nodeClassRef"),
                format!(
                    "nodeClassRef needs {} in karpenter.sh/v1 (group: karpenter.k8s.aws, kind: EC2NodeClass)",
                    missing.join(" and ")
                ),
            ));
        }
    }
    if get(doc, &["spec", "template", "spec", "kubelet"]).is_some() {
        findings.push((
            at("spec.template.spec.kubelet"),
            "kubelet moved to the EC2NodeClass (spec.kubelet) in v1".to_string(),
        ));
    }
    if get(doc, &["spec", "disruption", "expireAfter"]).is_some() {
        findings.push((
            at("spec.disruption.expireAfter"),
            "expireAfter moved to spec.template.spec.expireAfter in v1".to_string(),
        ));
    }
    Classified::Retired {
        message: "karpenter.sh/v1beta1 NodePool is no longer served; migrate it to karpenter.sh/v1".into(),
        hint: "set apiVersion: karpenter.sh/v1; WhenUnderutilized became WhenEmptyOrUnderutilized; nodeClassRef needs group: karpenter.k8s.aws and kind: EC2NodeClass; kubelet moved to EC2NodeClass spec.kubelet; expireAfter moved to spec.template.spec".into(),
        findings,
    }
}

fn retired_ec2nodeclass(doc: &Value) -> Classified {
    let mut findings = Vec::new();
    if get(doc, &["spec", "amiSelectorTerms"]).is_none() {
        findings.push((
            at("spec"),
            "amiSelectorTerms is required in v1: use an alias such as `- alias: al2023@latest`, or selector terms with amiFamily"
                .to_string(),
        ));
    }
    Classified::Retired {
        message: "karpenter.k8s.aws/v1beta1 EC2NodeClass is no longer served; migrate it to karpenter.k8s.aws/v1".into(),
        hint: "set apiVersion: karpenter.k8s.aws/v1; amiSelectorTerms is required (an alias like al2023@latest replaces amiFamily); kubelet settings now live in spec.kubelet".into(),
        findings,
    }
}

fn retired_provisioner(doc: &Value) -> Classified {
    let mut findings = Vec::new();
    for (field, what) in [
        (
            "providerRef",
            "providerRef became spec.template.spec.nodeClassRef {group, kind, name} in v1",
        ),
        (
            "provider",
            "inline provider settings became an EC2NodeClass in v1",
        ),
        (
            "ttlSecondsAfterEmpty",
            "ttlSecondsAfterEmpty became spec.disruption (consolidationPolicy WhenEmpty with consolidateAfter) in v1",
        ),
        (
            "ttlSecondsUntilExpired",
            "ttlSecondsUntilExpired became spec.template.spec.expireAfter in v1",
        ),
        (
            "consolidation",
            "consolidation became spec.disruption.consolidationPolicy in v1",
        ),
        (
            "requirements",
            "requirements moved to spec.template.spec.requirements in v1",
        ),
    ] {
        if get(doc, &["spec", field]).is_some() {
            findings.push((at(&format!("spec.{field}")), what.to_string()));
        }
    }
    Classified::Retired {
        message: "karpenter.sh/v1alpha5 Provisioner was replaced by NodePool (karpenter.sh/v1)".into(),
        hint: "rewrite it as a karpenter.sh/v1 NodePool: requirements, taints and labels move under spec.template; providerRef becomes nodeClassRef; TTLs become spec.disruption and expireAfter".into(),
        findings,
    }
}

fn retired_awsnodetemplate(doc: &Value) -> Classified {
    let mut findings = Vec::new();
    for (field, what) in [
        (
            "subnetSelector",
            "subnetSelector became the list subnetSelectorTerms in v1",
        ),
        (
            "securityGroupSelector",
            "securityGroupSelector became the list securityGroupSelectorTerms in v1",
        ),
        (
            "amiSelector",
            "amiSelector became the list amiSelectorTerms in v1",
        ),
        (
            "launchTemplate",
            "launchTemplate is not supported in v1; configure the EC2NodeClass fields instead",
        ),
        (
            "instanceProfile",
            "instanceProfile is still supported, but role is preferred in v1",
        ),
    ] {
        if get(doc, &["spec", field]).is_some() {
            findings.push((at(&format!("spec.{field}")), what.to_string()));
        }
    }
    Classified::Retired {
        message: "karpenter.k8s.aws/v1alpha1 AWSNodeTemplate was replaced by EC2NodeClass (karpenter.k8s.aws/v1)".into(),
        hint: "rewrite it as a karpenter.k8s.aws/v1 EC2NodeClass: selectors become *SelectorTerms lists, amiSelectorTerms (e.g. alias al2023@latest) is required, and role replaces instanceProfile".into(),
        findings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v1beta1_nodepool_gets_migration_findings() {
        let doc = json!({
            "apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "disruption": {"consolidationPolicy": "WhenUnderutilized"},
                "template": {"spec": {"nodeClassRef": {"name": "default"}}}
            }
        });
        let Classified::Retired { findings, hint, .. } = classify(&doc) else {
            panic!("not retired")
        };
        assert!(hint.contains("WhenEmptyOrUnderutilized"));
        let paths: Vec<String> = findings.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(
            paths,
            [
                "spec.disruption.consolidationPolicy",
                "spec.template.spec.nodeClassRef"
            ]
        );
        assert!(findings[1].1.contains("group and kind"));
    }

    #[test]
    fn provisioner_is_retired() {
        let doc = json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
            "spec": {"providerRef": {"name": "x"}}});
        assert!(
            matches!(classify(&doc), Classified::Retired { findings, .. } if findings.len() == 1)
        );
    }

    #[test]
    fn typo_in_kind_gets_a_suggestion() {
        let doc = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePol"});
        match classify(&doc) {
            Classified::UnknownKarpenter { hint, .. } => {
                assert_eq!(hint.as_deref(), Some("did you mean kind: NodePool?"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_objects_are_skipped_and_bare_maps_are_not_objects() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert!(matches!(classify(&cm), Classified::Other { .. }));
        assert_eq!(
            classify(&json!({"kind": "X"})),
            Classified::NotAnObject {
                missing: "apiVersion"
            }
        );
    }
}
