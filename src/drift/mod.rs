//! Drift: whether a node still matches its NodePool and EC2NodeClass.
//!
//! A pure module (no kube client, no AWS, no I/O, no clock): the
//! controller's disruption logic acts on [`check`], and `dovetail diff
//! --impact` previews a configuration change with
//! `config::diff::impact::build`, on the hashes and requirements here.
//!
//! A node drifts when:
//! - its NodePool's [hash](hash::nodepool_hash) (the template's labels,
//!   annotations, taints, startup taints, node class reference, `expireAfter`
//!   and `terminationGracePeriod`) differs from the one stamped on its
//!   NodeClaim;
//! - its EC2NodeClass's [hash](hash::ec2nodeclass_hash) (the spec but the
//!   selector terms, plus the resolved AMI family) differs likewise;
//! - its labels no longer satisfy the NodePool's requirements;
//! - its image is not one its EC2NodeClass currently resolves to.
//!
//! Hashes are stamped on NodeClaims under dovetail's own annotation keys
//! with a hash version (`dovetail.dev/nodepool-hash`,
//! `dovetail.dev/ec2nodeclass-hash` and a `-version` annotation for each;
//! `stamp_annotations`). A NodeClaim without them (adopted from Karpenter, or
//! launched before a dovetail upgrade that changed hashing) is stamped, never
//! drifted for that reason.
//!
//! Budget pacing (`budget`) serves the impact report and the disruption
//! budgets. The module uses only `api`, `model` and `diag`; never
//! `config`, `cli`, `cluster` or `cloud`.

pub mod budget;
pub mod hash;

use std::collections::BTreeMap;

use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::model::labels::normalize_labels;
use crate::model::requirements::{self, Operator, Requirement, RequirementError, Requirements};
use crate::model::resources::Resources;

pub use hash::{
    EC2NODECLASS_HASH_VERSION, NODEPOOL_HASH_VERSION, ec2nodeclass_hash, nodepool_hash,
};

/// The NodePool hash stamped on a NodeClaim.
pub const ANNOTATION_NODEPOOL_HASH: &str = "dovetail.dev/nodepool-hash";
/// The version of [`ANNOTATION_NODEPOOL_HASH`]'s hash.
pub const ANNOTATION_NODEPOOL_HASH_VERSION: &str = "dovetail.dev/nodepool-hash-version";
/// The EC2NodeClass hash stamped on a NodeClaim.
pub const ANNOTATION_EC2NODECLASS_HASH: &str = "dovetail.dev/ec2nodeclass-hash";
/// The version of [`ANNOTATION_EC2NODECLASS_HASH`]'s hash.
pub const ANNOTATION_EC2NODECLASS_HASH_VERSION: &str = "dovetail.dev/ec2nodeclass-hash-version";

/// The label Karpenter puts on nodes with their EC2NodeClass's name.
const LABEL_EC2NODECLASS: &str = crate::api::LABEL_EC2NODECLASS;

/// The annotations that stamp a NodeClaim launched from `pool` and `class`.
pub fn stamp_annotations(pool: &NodePool, class: &EC2NodeClass) -> BTreeMap<String, String> {
    let mut out = nodepool_stamp(pool);
    out.extend(ec2nodeclass_stamp(class));
    out
}

fn nodepool_stamp(pool: &NodePool) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ANNOTATION_NODEPOOL_HASH.to_string(), nodepool_hash(pool)),
        (
            ANNOTATION_NODEPOOL_HASH_VERSION.to_string(),
            NODEPOOL_HASH_VERSION.to_string(),
        ),
    ])
}

fn ec2nodeclass_stamp(class: &EC2NodeClass) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            ANNOTATION_EC2NODECLASS_HASH.to_string(),
            ec2nodeclass_hash(class),
        ),
        (
            ANNOTATION_EC2NODECLASS_HASH_VERSION.to_string(),
            EC2NODECLASS_HASH_VERSION.to_string(),
        ),
    ])
}

/// What drift needs to know about one node: a Node with its NodeClaim, or a
/// NodeClaim whose Node has not registered yet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    /// The Node's name, or the NodeClaim's when there is no Node yet.
    pub name: String,
    /// The NodeClaim's name, when there is one.
    pub nodeclaim: Option<String>,
    /// The Node's labels over the NodeClaim's, beta keys normalised.
    pub labels: BTreeMap<String, String>,
    /// The NodeClaim's annotations (where the drift hashes are stamped).
    pub annotations: BTreeMap<String, String>,
    /// The EC2NodeClass the node was launched from.
    pub nodeclass: Option<String>,
    /// The image the instance runs (`status.imageID` of the NodeClaim).
    pub image_id: Option<String>,
    /// The node's capacity (Node status, else NodeClaim status).
    pub capacity: Resources,
}

impl NodeView {
    /// The view of a NodeClaim alone.
    pub fn from_nodeclaim(claim: &NodeClaim) -> NodeView {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let status = claim.status.as_ref();
        NodeView {
            nodeclaim: Some(name.clone()),
            name: status
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or(name),
            labels: normalize_labels(&claim.metadata.labels.clone().unwrap_or_default()),
            annotations: claim.metadata.annotations.clone().unwrap_or_default(),
            nodeclass: Some(claim.spec.node_class_ref.name.clone()),
            image_id: status.and_then(|s| s.image_id.clone()),
            capacity: status
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| Resources::from_k8s(c).ok())
                .unwrap_or_default(),
        }
    }

    /// The NodePool the node belongs to (its `karpenter.sh/nodepool` label).
    pub fn nodepool(&self) -> Option<&str> {
        self.labels
            .get(crate::api::LABEL_NODEPOOL)
            .map(String::as_str)
    }

    /// The EC2NodeClass the node was launched from: its NodeClaim's
    /// reference, else its `karpenter.k8s.aws/ec2nodeclass` label.
    pub fn nodeclass(&self) -> Option<&str> {
        self.nodeclass
            .as_deref()
            .or_else(|| self.labels.get(LABEL_EC2NODECLASS).map(String::as_str))
    }

    /// The stamped hash under `hash_key` if it was stamped with `version`.
    fn stamped(&self, hash_key: &str, version_key: &str, version: &str) -> Option<&str> {
        match self.annotations.get(version_key) {
            Some(v) if v == version => self.annotations.get(hash_key).map(String::as_str),
            _ => None,
        }
    }

    /// The NodePool hash stamped under the current version.
    pub fn stamped_nodepool_hash(&self) -> Option<&str> {
        self.stamped(
            ANNOTATION_NODEPOOL_HASH,
            ANNOTATION_NODEPOOL_HASH_VERSION,
            NODEPOOL_HASH_VERSION,
        )
    }

    /// The EC2NodeClass hash stamped under the current version.
    pub fn stamped_ec2nodeclass_hash(&self) -> Option<&str> {
        self.stamped(
            ANNOTATION_EC2NODECLASS_HASH,
            ANNOTATION_EC2NODECLASS_HASH_VERSION,
            EC2NODECLASS_HASH_VERSION,
        )
    }
}

/// Why a node drifts (or may drift).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriftReason {
    /// The NodePool's template differs from the one the node was launched
    /// with; `fields` names what changed, when known.
    NodePoolTemplate { fields: Vec<String> },
    /// The node's labels no longer satisfy the NodePool's requirements.
    Requirements { conflict: String },
    /// The EC2NodeClass differs from the one the node was launched with.
    EC2NodeClass { fields: Vec<String> },
    /// The image the node runs is not one the EC2NodeClass resolves to.
    Ami { image: String },
    /// The AMI selection changed: the node drifts when the new selection
    /// resolves to a different image (only known once resolved in AWS).
    AmiSelection { old: String, new: String },
    /// The node's NodePool is deleted: the node is drained and removed.
    NodePoolDeleted,
    /// The node's subnet is no longer one the EC2NodeClass selects.
    Subnet { subnet: String },
    /// The node's security groups are no longer those the EC2NodeClass
    /// selects.
    SecurityGroups { groups: Vec<String> },
    /// The node's instance type no longer exists, or no longer has an
    /// offering in its zone and capacity type.
    InstanceType { instance_type: String, why: String },
    /// The node runs in a capacity reservation the EC2NodeClass no longer
    /// selects (its terms dropped it).
    CapacityReservation { id: String },
    /// The node's placement group (its label; `None`: none) is not the one
    /// its EC2NodeClass resolves to now (`class`).
    PlacementGroup {
        node: Option<String>,
        class: Option<String>,
    },
}

impl DriftReason {
    /// A short, stable name: `nodepool_template`, `requirements`, ...
    pub fn code(&self) -> &'static str {
        match self {
            DriftReason::NodePoolTemplate { .. } => "nodepool_template",
            DriftReason::Requirements { .. } => "requirements",
            DriftReason::EC2NodeClass { .. } => "ec2nodeclass",
            DriftReason::Ami { .. } => "ami",
            DriftReason::AmiSelection { .. } => "ami_selection",
            DriftReason::NodePoolDeleted => "nodepool_deleted",
            DriftReason::Subnet { .. } => "subnet",
            DriftReason::SecurityGroups { .. } => "security_groups",
            DriftReason::InstanceType { .. } => "instance_type",
            DriftReason::CapacityReservation { .. } => "capacity_reservation",
            DriftReason::PlacementGroup { .. } => "placement_group",
        }
    }

    /// The reason the reference writes on the NodeClaim's `Drifted`
    /// condition, and its rank: the reference checks the NodePool's hash,
    /// then its requirements, then the instance type, then the cloud (the
    /// EC2NodeClass's hash, the image, then security groups, subnets,
    /// capacity reservation and placement group), and names the first that
    /// drifted.
    pub fn condition_reason(&self) -> (u8, &'static str) {
        match self {
            DriftReason::NodePoolTemplate { .. } | DriftReason::NodePoolDeleted => {
                (0, "NodePoolDrifted")
            }
            DriftReason::Requirements { .. } => (1, "RequirementsDrifted"),
            DriftReason::InstanceType { .. } => (2, "InstanceTypeNotFound"),
            DriftReason::EC2NodeClass { .. } => (3, "NodeClassDrift"),
            DriftReason::Ami { .. } | DriftReason::AmiSelection { .. } => (4, "AMIDrift"),
            DriftReason::SecurityGroups { .. } => (5, "SecurityGroupDrift"),
            DriftReason::Subnet { .. } => (6, "SubnetDrift"),
            DriftReason::CapacityReservation { .. } => (7, "CapacityReservationDrift"),
            DriftReason::PlacementGroup { .. } => (8, "PlacementGroupDrift"),
        }
    }

    /// Whether the node certainly drifts (not only if a selection resolves
    /// to a different image).
    pub fn is_certain(&self) -> bool {
        !matches!(self, DriftReason::AmiSelection { .. })
    }

    /// Whether the reason comes from the EC2NodeClass.
    pub fn is_nodeclass(&self) -> bool {
        matches!(
            self,
            DriftReason::EC2NodeClass { .. }
                | DriftReason::Ami { .. }
                | DriftReason::AmiSelection { .. }
                | DriftReason::Subnet { .. }
                | DriftReason::SecurityGroups { .. }
                | DriftReason::CapacityReservation { .. }
                | DriftReason::PlacementGroup { .. }
        )
    }
}

impl std::fmt::Display for DriftReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields = |fields: &[String]| {
            if fields.is_empty() {
                String::new()
            } else {
                format!(" ({})", fields.join(", "))
            }
        };
        match self {
            DriftReason::NodePoolTemplate { fields: f2 } => {
                write!(f, "NodePool template changed{}", fields(f2))
            }
            DriftReason::Requirements { conflict } => {
                write!(f, "labels no longer meet the requirements: {conflict}")
            }
            DriftReason::EC2NodeClass { fields: f2 } => {
                write!(f, "EC2NodeClass changed{}", fields(f2))
            }
            DriftReason::Ami { image } => {
                write!(f, "image {image} is not one the EC2NodeClass resolves to")
            }
            DriftReason::AmiSelection { old, new } => write!(
                f,
                "AMI selection changed from {old} to {new}: drifts when the new selection resolves to a different image"
            ),
            DriftReason::NodePoolDeleted => f.write_str("NodePool deleted: the node is drained"),
            DriftReason::Subnet { subnet } => {
                write!(
                    f,
                    "subnet {subnet} is no longer selected by the EC2NodeClass"
                )
            }
            DriftReason::SecurityGroups { groups } => write!(
                f,
                "security groups {} are no longer those the EC2NodeClass selects",
                groups.join(",")
            ),
            DriftReason::InstanceType { instance_type, why } => {
                write!(f, "instance type {instance_type} {why}")
            }
            DriftReason::CapacityReservation { id } => write!(
                f,
                "capacity reservation {id} is no longer selected by the EC2NodeClass"
            ),
            DriftReason::PlacementGroup { node, class } => write!(
                f,
                "placement group {} is not the EC2NodeClass's ({})",
                node.as_deref().unwrap_or("none"),
                class.as_deref().unwrap_or("none")
            ),
        }
    }
}

/// The outcome of [`check`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriftVerdict {
    /// Why the node drifts; empty when it does not.
    pub reasons: Vec<DriftReason>,
    /// Annotations the NodeClaim lacks (or has under another hash version)
    /// and should be stamped with; empty when it is stamped.
    pub stamp: BTreeMap<String, String>,
}

impl DriftVerdict {
    /// Whether the node drifts.
    pub fn is_drifted(&self) -> bool {
        !self.reasons.is_empty()
    }

    /// Whether the NodeClaim should be stamped.
    pub fn needs_stamping(&self) -> bool {
        !self.stamp.is_empty()
    }
}

/// Why a NodePool's requirements could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NodePool {nodepool:?}: {source}")]
pub struct RequirementsError {
    pub nodepool: String,
    #[source]
    pub source: RequirementError,
}

/// The requirements of a NodePool's template, in the model's algebra.
pub fn nodepool_requirements(pool: &NodePool) -> Result<Requirements, RequirementsError> {
    let mut out = Requirements::new();
    for r in pool.requirements() {
        let failed = |source| RequirementsError {
            nodepool: pool.metadata.name.clone().unwrap_or_default(),
            source,
        };
        let op = Operator::parse(r.operator.as_str())
            .ok_or_else(|| failed(RequirementError::UnknownOperator(r.operator.to_string())))?;
        out.add(
            &r.key,
            Requirement::new(&r.key, op, r.values()).map_err(failed)?,
        );
    }
    Ok(out)
}

/// Whether labels meet requirements as Karpenter's drift check has it: each
/// required key must allow the node's value; a key the node lacks is
/// accepted when the requirement allows absence or the key is well known.
pub fn requirements_conflict(
    requirements: &Requirements,
    labels: &BTreeMap<String, String>,
) -> Option<String> {
    Requirements::from_labels(labels)
        .compatible(requirements, requirements::allow_well_known)
        .err()
        .map(|c| c.to_string())
}

/// Whether a node has drifted from `pool` and `class` (as they are now),
/// and which annotations its NodeClaim should be stamped with.
pub fn check(
    node: &NodeView,
    pool: &NodePool,
    class: &EC2NodeClass,
) -> Result<DriftVerdict, RequirementsError> {
    Target::new(pool, class).check(node)
}

/// A NodePool and an EC2NodeClass as drift reads them, for checking many
/// nodes: the hashes, the requirements and the resolved images are
/// computed once, not per node.
pub struct Target<'a> {
    pool: &'a NodePool,
    class: &'a EC2NodeClass,
    pool_hash: String,
    class_hash: String,
    requirements: Result<Requirements, RequirementsError>,
}

impl<'a> Target<'a> {
    pub fn new(pool: &'a NodePool, class: &'a EC2NodeClass) -> Self {
        Target {
            pool,
            class,
            pool_hash: nodepool_hash(pool),
            class_hash: ec2nodeclass_hash(class),
            requirements: nodepool_requirements(pool),
        }
    }

    /// Whether `node` has drifted from the pool and class, and which
    /// annotations its NodeClaim should be stamped with.
    pub fn check(&self, node: &NodeView) -> Result<DriftVerdict, RequirementsError> {
        let mut verdict = DriftVerdict::default();
        match node.stamped_nodepool_hash() {
            Some(stamped) if stamped != self.pool_hash => verdict
                .reasons
                .push(DriftReason::NodePoolTemplate { fields: Vec::new() }),
            Some(_) => {}
            None => verdict.stamp.extend(nodepool_stamp(self.pool)),
        }
        let requirements = self.requirements.as_ref().map_err(Clone::clone)?;
        if let Some(conflict) = requirements_conflict(requirements, &node.labels) {
            verdict.reasons.push(DriftReason::Requirements { conflict });
        }
        match node.stamped_ec2nodeclass_hash() {
            Some(stamped) if stamped != self.class_hash => verdict
                .reasons
                .push(DriftReason::EC2NodeClass { fields: Vec::new() }),
            Some(_) => {}
            None => verdict.stamp.extend(ec2nodeclass_stamp(self.class)),
        }
        let resolved = self
            .class
            .status
            .as_ref()
            .and_then(|s| s.amis.as_deref())
            .unwrap_or_default();
        if let Some(image) = &node.image_id
            && !resolved.is_empty()
            && !resolved.iter().any(|a| &a.id == image)
        {
            verdict.reasons.push(DriftReason::Ami {
                image: image.clone(),
            });
        }
        Ok(verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeSelectorRequirementWithMinValues as Req;

    /// Karpenter v1.14.1's order: the core's checks (NodePool hash,
    /// requirements, instance type), then the provider's isNodeClassDrifted
    /// (the static hash first, the image, then security groups, subnets,
    /// capacity reservation, placement group).
    #[test]
    fn drift_reasons_rank_in_karpenters_order() {
        let reasons = [
            DriftReason::NodePoolTemplate { fields: Vec::new() },
            DriftReason::Requirements {
                conflict: String::new(),
            },
            DriftReason::InstanceType {
                instance_type: String::new(),
                why: String::new(),
            },
            DriftReason::EC2NodeClass { fields: Vec::new() },
            DriftReason::Ami {
                image: String::new(),
            },
            DriftReason::SecurityGroups { groups: Vec::new() },
            DriftReason::Subnet {
                subnet: String::new(),
            },
            DriftReason::CapacityReservation { id: String::new() },
            DriftReason::PlacementGroup {
                node: None,
                class: None,
            },
        ];
        let ranked: Vec<(u8, &str)> = reasons.iter().map(DriftReason::condition_reason).collect();
        assert!(ranked.windows(2).all(|w| w[0].0 < w[1].0), "{ranked:?}");
        assert_eq!(
            ranked.iter().map(|r| r.1).collect::<Vec<_>>(),
            [
                "NodePoolDrifted",
                "RequirementsDrifted",
                "InstanceTypeNotFound",
                "NodeClassDrift",
                "AMIDrift",
                "SecurityGroupDrift",
                "SubnetDrift",
                "CapacityReservationDrift",
                "PlacementGroupDrift"
            ]
        );
    }
    use crate::api::{Operator as ApiOperator, Taint, TaintEffect};

    fn node(labels: &[(&str, &str)], annotations: BTreeMap<String, String>) -> NodeView {
        NodeView {
            name: "n1".into(),
            nodeclaim: Some("general-abc".into()),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations,
            nodeclass: Some("default".into()),
            ..NodeView::default()
        }
    }

    const ON_DEMAND: [(&str, &str); 2] = [
        ("karpenter.sh/nodepool", "general"),
        ("karpenter.sh/capacity-type", "on-demand"),
    ];

    #[test]
    fn unstamped_nodeclaim_is_stamped_not_drifted() {
        let (pool, class) = (NodePool::test("general"), EC2NodeClass::test("default"));
        let mut tainted = pool.clone();
        tainted.spec.template.spec.taints =
            Some(vec![Taint::new("a", None, TaintEffect::NoSchedule)]);
        // Whatever the NodePool is now, a NodeClaim without dovetail's keys
        // is stamped with its current hashes.
        let verdict = check(&node(&ON_DEMAND, BTreeMap::new()), &tainted, &class).unwrap();
        assert!(!verdict.is_drifted(), "{verdict:?}");
        assert_eq!(verdict.stamp, stamp_annotations(&tainted, &class));
        assert_eq!(verdict.stamp.len(), 4);
        // Once stamped, it is current; after a change it drifts.
        let stamped = node(&ON_DEMAND, stamp_annotations(&pool, &class));
        let current = check(&stamped, &pool, &class).unwrap();
        assert_eq!(current, DriftVerdict::default());
        let drifted = check(&stamped, &tainted, &class).unwrap();
        assert_eq!(
            drifted.reasons,
            [DriftReason::NodePoolTemplate { fields: vec![] }]
        );
        assert!(!drifted.needs_stamping());
    }

    #[test]
    fn another_hash_version_is_restamped_not_drifted() {
        let (pool, class) = (NodePool::test("general"), EC2NodeClass::test("default"));
        let mut annotations = stamp_annotations(&pool, &class);
        annotations.insert(ANNOTATION_NODEPOOL_HASH.into(), "0000000000000000".into());
        annotations.insert(ANNOTATION_NODEPOOL_HASH_VERSION.into(), "v0".into());
        annotations.insert(ANNOTATION_EC2NODECLASS_HASH.into(), "0".into());
        annotations.remove(ANNOTATION_EC2NODECLASS_HASH_VERSION);
        let verdict = check(&node(&ON_DEMAND, annotations), &pool, &class).unwrap();
        assert!(!verdict.is_drifted(), "{verdict:?}");
        assert_eq!(verdict.stamp, stamp_annotations(&pool, &class));
    }

    #[test]
    fn labels_are_checked_against_the_requirements() {
        let (pool, class) = (NodePool::test("general"), EC2NodeClass::test("default"));
        let spot = pool.clone().with_requirement(Req::new(
            "karpenter.sh/capacity-type",
            ApiOperator::In,
            &["spot"],
        ));
        let stamped = stamp_annotations(&spot, &class);
        let verdict = check(&node(&ON_DEMAND, stamped.clone()), &spot, &class).unwrap();
        assert_eq!(verdict.reasons.len(), 1, "{verdict:?}");
        assert_eq!(verdict.reasons[0].code(), "requirements");
        assert!(
            verdict.reasons[0]
                .to_string()
                .contains("karpenter.sh/capacity-type"),
            "{}",
            verdict.reasons[0]
        );
        // A well-known key the node lacks is accepted; a custom one is not.
        let arch = pool.clone().with_requirement(Req::new(
            "kubernetes.io/arch",
            ApiOperator::In,
            &["arm64"],
        ));
        assert!(
            check(&node(&ON_DEMAND, stamped.clone()), &arch, &class)
                .unwrap()
                .reasons
                .is_empty()
        );
        let team = pool
            .clone()
            .with_requirement(Req::new("team", ApiOperator::In, &["a"]));
        assert_eq!(
            check(&node(&ON_DEMAND, stamped.clone()), &team, &class)
                .unwrap()
                .reasons[0]
                .code(),
            "requirements"
        );
        let not_team = pool.with_requirement(Req::new("team", ApiOperator::NotIn, &["a"]));
        assert!(
            check(&node(&ON_DEMAND, stamped), &not_team, &class)
                .unwrap()
                .reasons
                .is_empty()
        );
    }

    #[test]
    fn an_image_the_nodeclass_no_longer_resolves_to_drifts() {
        let (pool, mut class) = (NodePool::test("general"), EC2NodeClass::test("default"));
        let mut n = node(&ON_DEMAND, stamp_annotations(&pool, &class));
        n.image_id = Some("ami-old".into());
        // Not resolved yet: nothing to compare with.
        assert!(!check(&n, &pool, &class).unwrap().is_drifted());
        class.status = Some(
            serde_json::from_value(serde_json::json!({
                "amis": [{"id": "ami-new", "requirements": []}]
            }))
            .unwrap(),
        );
        let verdict = check(&n, &pool, &class).unwrap();
        assert_eq!(
            verdict.reasons,
            [DriftReason::Ami {
                image: "ami-old".into()
            }]
        );
        n.image_id = Some("ami-new".into());
        assert!(!check(&n, &pool, &class).unwrap().is_drifted());
    }

    #[test]
    fn node_view_of_a_nodeclaim() {
        let mut claim = NodeClaim::test("general-abc");
        claim.metadata.labels = Some(BTreeMap::from([(
            "failure-domain.beta.kubernetes.io/zone".to_string(),
            "us-east-1a".to_string(),
        )]));
        let view = NodeView::from_nodeclaim(&claim);
        assert_eq!(view.name, "general-abc");
        assert_eq!(view.nodeclass(), Some("default"));
        assert_eq!(
            view.labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("us-east-1a")
        );
    }
}
