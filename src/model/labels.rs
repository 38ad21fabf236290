//! Well-known label keys, beta-label normalisation and label selectors.

use std::collections::{BTreeMap, BTreeSet};

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

pub const CAPACITY_TYPES: [&str; 3] = ["on-demand", "spot", "reserved"];
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
pub const RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const RESERVATION_INTERRUPTIBLE: &str = "karpenter.k8s.aws/capacity-reservation-interruptible";
/// The labels only a node launched into a capacity reservation carries.
pub const RESERVATION_KEYS: [&str; 3] =
    [RESERVATION_ID, RESERVATION_TYPE, RESERVATION_INTERRUPTIBLE];
pub const PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
pub const PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";

/// Maps a deprecated beta label key to its GA key; other keys are unchanged.
pub fn normalize_key(key: &str) -> &str {
    match key {
        "beta.kubernetes.io/arch" => ARCH,
        "beta.kubernetes.io/os" => OS,
        "beta.kubernetes.io/instance-type" => INSTANCE_TYPE,
        "failure-domain.beta.kubernetes.io/zone" => ZONE,
        "failure-domain.beta.kubernetes.io/region" => REGION,
        other => other,
    }
}

/// Labels whose values the provisioner knows even when a NodePool does not
/// constrain them, so a pod may require them without the NodePool defining
/// them ("undefined well-known label allowed"). Karpenter v1.14.1's list
/// with the AWS provider's additions.
pub fn is_well_known(key: &str) -> bool {
    matches!(
        key,
        ZONE | REGION
            | ARCH
            | OS
            | INSTANCE_TYPE
            | WINDOWS_BUILD
            | NODEPOOL
            | CAPACITY_TYPE
            | ZONE_ID
            | RESERVATION_ID
            | RESERVATION_TYPE
            | RESERVATION_INTERRUPTIBLE
            | PLACEMENT_GROUP_ID
            | PLACEMENT_GROUP_PARTITION
    ) || key.starts_with("karpenter.k8s.aws/instance-")
}

/// Normalises every key of a label map.
pub fn normalize_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(k, v)| (normalize_key(k).to_string(), v.clone()))
        .collect()
}

/// A set-based label selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A `metav1.LabelSelector`. `None` inside a term means "matches nothing"
/// as in Kubernetes; an empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<(String, SelectorOp, BTreeSet<String>)>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|(k, op, values)| {
                let got = labels.get(k);
                match op {
                    SelectorOp::In => got.is_some_and(|v| values.contains(v)),
                    SelectorOp::NotIn => got.is_none_or(|v| !values.contains(v)),
                    SelectorOp::Exists => got.is_some(),
                    SelectorOp::DoesNotExist => got.is_none(),
                }
            })
    }

    /// Converts a Kubernetes selector; unknown operators are an error.
    pub fn from_k8s(
        s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    ) -> Result<Self, String> {
        let mut out = LabelSelector {
            match_labels: s.match_labels.clone().unwrap_or_default(),
            match_expressions: Vec::new(),
        };
        for e in s.match_expressions.iter().flatten() {
            let op = match e.operator.as_str() {
                "In" => SelectorOp::In,
                "NotIn" => SelectorOp::NotIn,
                "Exists" => SelectorOp::Exists,
                "DoesNotExist" => SelectorOp::DoesNotExist,
                other => return Err(format!("unknown label selector operator {other:?}")),
            };
            let values = e.values.iter().flatten().cloned().collect();
            out.match_expressions.push((e.key.clone(), op, values));
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beta_keys_are_normalised() {
        assert_eq!(normalize_key("beta.kubernetes.io/arch"), ARCH);
        assert_eq!(
            normalize_key("failure-domain.beta.kubernetes.io/zone"),
            ZONE
        );
        assert_eq!(normalize_key("custom"), "custom");
    }

    #[test]
    fn selector_matches_labels_and_expressions() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())]
            .into_iter()
            .collect();
        let mut s = LabelSelector::default();
        assert!(s.matches(&labels));
        s.match_labels.insert("app".into(), "web".into());
        assert!(s.matches(&labels));
        s.match_expressions
            .push(("tier".into(), SelectorOp::DoesNotExist, BTreeSet::new()));
        assert!(s.matches(&labels));
        s.match_expressions.push((
            "app".into(),
            SelectorOp::NotIn,
            ["web".to_string()].into_iter().collect(),
        ));
        assert!(!s.matches(&labels));
    }
}
