//! The cloud-provider interface: launching and terminating instances for
//! NodeClaims, and the instance types a NodePool may use. Implementations:
//! the simulated EC2 (`world::ec2`), AWS (`cloud::aws`), and KWOK
//! (`world::kwok`: the simulated EC2's capacity as Nodes KWOK keeps alive).
//!
//! The controller depends only on [`CloudProvider`]; errors are typed so
//! the controller can react to each (insufficient capacity marks offerings
//! unavailable and retries elsewhere; not-found means the instance is gone).
//!
//! `CloudProvider` creates, deletes, gets and lists instances, lists each
//! NodePool's instance types, resolves node classes (`resolve_node_class`) and
//! tells drift (`is_drifted`). `cloud::select` is what both providers read of
//! a NodeClaim's requirements and requests.

pub mod aws;
pub(crate) mod select;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use crate::api::ec2nodeclass::{
    Ami, CapacityReservation, EC2NodeClassStatus, SecurityGroup, Subnet,
};
use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::clock::Timestamp;
use crate::drift::DriftReason;
use crate::model::InstanceType;

/// An offering: one instance type in one zone with one capacity type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OfferingKey {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
}

/// The lifecycle state of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
}

/// A launched instance as the provider reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// The EC2 instance id, e.g. `i-0123456789abcdef0`.
    pub id: String,
    /// `aws:///<zone>/<id>`, as the kubelet sets `spec.providerID`.
    pub provider_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// USD per hour of the offering it was launched on.
    pub price: f64,
    pub launched_at: Timestamp,
    pub state: InstanceState,
    /// The NodeClaim it was launched for (the `karpenter.sh/nodeclaim` tag).
    pub nodeclaim: String,
    /// Without that tag: the NodeClaims of the CreateFleet that launched
    /// it for several (`dovetail.dev/launch-batch`), one of which it is
    /// for; the tag per instance follows the fleet's answer, and a replica
    /// that died in between leaves only this.
    pub launch_batch: Vec<String>,
    /// The NodePool of that NodeClaim (the `karpenter.sh/nodepool` tag).
    pub nodepool: String,
    /// Well-known labels of the instance type, zone and capacity type, for
    /// the node that will register. Shared: a provider's list hands out
    /// every instance, and the labels are most of an instance.
    pub labels: Arc<BTreeMap<String, String>>,
    /// The image it was launched from.
    pub image_id: Option<String>,
    /// The subnet it was launched into.
    pub subnet_id: Option<String>,
    /// The security groups of its network interface, sorted.
    pub security_group_ids: Vec<String>,
    /// It has EFA interfaces: only then does its NodeClaim list
    /// `vpc.amazonaws.com/efa` in its capacity (Karpenter's rule).
    pub efa_attached: bool,
}

/// The outcome of [`CloudProvider::create`]: the instance, and the
/// offerings the launch tried first that had no capacity (as CreateFleet
/// reports errors for some overrides and launches from another). The
/// controller marks those unavailable, as it does for a failed launch.
#[derive(Debug, Clone, PartialEq)]
pub struct Launched {
    pub instance: Instance,
    pub refused: Vec<OfferingKey>,
}

/// The status conditions of an EC2NodeClass, as Karpenter v1.14.1's
/// nodeclass controller writes them. `Ready` is their root: True when
/// every one it depends on is True.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum NodeClassCondition {
    #[serde(rename = "AMIsReady")]
    AmisReady,
    SubnetsReady,
    SecurityGroupsReady,
    InstanceProfileReady,
    /// Written by the capacity-reservation resolution; none of dovetail's
    /// providers resolves reservations yet, so it is written only when a
    /// problem names it.
    CapacityReservationsReady,
    /// `placementGroupSelector`: False when the group is not found.
    PlacementGroupReady,
    ValidationSucceeded,
}

impl NodeClassCondition {
    /// The conditions every resolution writes, in Karpenter's order.
    /// (`CapacityReservationsReady` too: the `ReservedCapacity` feature
    /// gate is on by default in v1.14.1.)
    pub const WRITTEN: [NodeClassCondition; 7] = [
        NodeClassCondition::AmisReady,
        NodeClassCondition::SubnetsReady,
        NodeClassCondition::SecurityGroupsReady,
        NodeClassCondition::InstanceProfileReady,
        NodeClassCondition::ValidationSucceeded,
        NodeClassCondition::PlacementGroupReady,
        NodeClassCondition::CapacityReservationsReady,
    ];

    /// What `ValidationSucceeded` waits for (Karpenter's
    /// `requiredConditions`).
    pub const VALIDATION_DEPENDS_ON: [NodeClassCondition; 4] = [
        NodeClassCondition::AmisReady,
        NodeClassCondition::InstanceProfileReady,
        NodeClassCondition::SecurityGroupsReady,
        NodeClassCondition::SubnetsReady,
    ];

    /// The condition's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeClassCondition::AmisReady => "AMIsReady",
            NodeClassCondition::SubnetsReady => "SubnetsReady",
            NodeClassCondition::SecurityGroupsReady => "SecurityGroupsReady",
            NodeClassCondition::InstanceProfileReady => "InstanceProfileReady",
            NodeClassCondition::CapacityReservationsReady => "CapacityReservationsReady",
            NodeClassCondition::PlacementGroupReady => "PlacementGroupReady",
            NodeClassCondition::ValidationSucceeded => "ValidationSucceeded",
        }
    }
}

impl std::fmt::Display for NodeClassCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Karpenter's condition reasons (and dovetail's own, for what dovetail
/// refuses: `UnsupportedField`, `RoleNotFound`).
pub mod reasons {
    pub const SUBNETS_NOT_FOUND: &str = "SubnetsNotFound";
    pub const SECURITY_GROUPS_NOT_FOUND: &str = "SecurityGroupsNotFound";
    pub const AMI_NOT_FOUND: &str = "AMINotFound";
    pub const UNSUPPORTED_ALIAS: &str = "UnsupportedAlias";
    pub const ROLE_NOT_FOUND: &str = "RoleNotFound";
    pub const PLACEMENT_GROUP_NOT_FOUND: &str = "PlacementGroupNotFound";
    pub const PLACEMENT_GROUP_RESOLUTION_FAILED: &str = "PlacementGroupResolutionFailed";
    pub const DEPENDENCIES_NOT_READY: &str = "DependenciesNotReady";
    pub const TAG_VALIDATION_FAILED: &str = "TagValidationFailed";
    pub const CREATE_FLEET_AUTH_FAILED: &str = "CreateFleetAuthCheckFailed";
    pub const CREATE_LAUNCH_TEMPLATE_AUTH_FAILED: &str = "CreateLaunchTemplateAuthCheckFailed";
    pub const RUN_INSTANCES_AUTH_FAILED: &str = "RunInstancesAuthCheckFailed";
    pub const USER_DATA_TOO_LARGE: &str = "UserDataSizeLimitExceeded";
    pub const CLUSTER_CIDR_FAILED: &str = "ClusterCIDRResolutionFailed";
    /// dovetail's: the launch validation would dry-run cannot be made
    /// (user data that cannot be rendered).
    pub const LAUNCH_TEMPLATE_INVALID: &str = "LaunchTemplateInvalid";
    /// dovetail's: no instance type to dry-run a launch of.
    pub const NO_COMPATIBLE_INSTANCE_TYPES: &str = "NoCompatibleInstanceTypes";
    /// The root condition's reason when a dependent is False.
    pub const UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";
}

/// Why a node class is not ready: the condition it sets False, with
/// Karpenter's reason and a message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeClassProblem {
    pub condition: NodeClassCondition,
    pub reason: String,
    pub message: String,
}

impl std::fmt::Display for NodeClassProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.condition, self.message)
    }
}

/// One condition as the status writes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConditionValue {
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

/// What an EC2NodeClass's selector terms resolve to in the cloud now: what
/// its status reports, and what instances launched from it use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeClassResolution {
    /// Images, newest first per requirement set (architecture, variant).
    pub amis: Vec<Ami>,
    pub subnets: Vec<Subnet>,
    pub security_groups: Vec<SecurityGroup>,
    pub instance_profile: Option<String>,
    /// The capacity reservations `capacityReservationSelectorTerms`
    /// select, by id (empty without terms). A failed lookup is a problem.
    pub capacity_reservations: Vec<CapacityReservation>,
    /// Each False condition with why; the node class is ready when this
    /// is empty.
    pub problems: Vec<NodeClassProblem>,
}

impl NodeClassResolution {
    /// Whether instances can be launched from the node class.
    pub fn is_ready(&self) -> bool {
        self.problems.is_empty()
    }

    /// Records a problem.
    pub fn problem(
        &mut self,
        condition: NodeClassCondition,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.problems.push(NodeClassProblem {
            condition,
            reason: reason.to_string(),
            message: message.into(),
        });
    }

    /// Whether a problem sets `condition` False.
    pub fn fails(&self, condition: NodeClassCondition) -> bool {
        self.problems.iter().any(|p| p.condition == condition)
    }

    /// Every problem, `Condition: message`, joined by `; ` (the reason a
    /// launch from a class that is not ready gives).
    pub fn summary(&self) -> String {
        self.problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The status conditions: each of [`NodeClassCondition::WRITTEN`]
    /// (and any other a problem names), True with its type as reason or
    /// False with the first problem's reason and every problem's message;
    /// then `Ready`, False with reason `UnhealthyDependents` and the
    /// failing ones named (`SubnetsReady=False, ...`) when any is False.
    pub fn conditions(&self) -> Vec<ConditionValue> {
        let mut types: Vec<NodeClassCondition> = NodeClassCondition::WRITTEN.to_vec();
        for p in &self.problems {
            if !types.contains(&p.condition) {
                types.push(p.condition);
            }
        }
        let mut out = Vec::new();
        let mut failing = Vec::new();
        for c in types {
            let mine: Vec<&NodeClassProblem> =
                self.problems.iter().filter(|p| p.condition == c).collect();
            match mine.first() {
                None => out.push(ConditionValue {
                    type_: c.as_str(),
                    status: true,
                    reason: c.as_str().to_string(),
                    message: String::new(),
                }),
                Some(first) => {
                    failing.push(format!("{c}=False"));
                    out.push(ConditionValue {
                        type_: c.as_str(),
                        status: false,
                        reason: first.reason.clone(),
                        message: mine
                            .iter()
                            .map(|p| p.message.as_str())
                            .collect::<Vec<_>>()
                            .join("; "),
                    });
                }
            }
        }
        out.push(if failing.is_empty() {
            ConditionValue {
                type_: "Ready",
                status: true,
                reason: "Ready".to_string(),
                message: String::new(),
            }
        } else {
            ConditionValue {
                type_: "Ready",
                status: false,
                reason: reasons::UNHEALTHY_DEPENDENTS.to_string(),
                message: failing.join(", "),
            }
        });
        out
    }

    /// The status fields it sets (conditions: [`Self::conditions`]).
    pub fn apply_to(&self, status: &mut EC2NodeClassStatus) {
        status.amis = Some(self.amis.clone());
        status.subnets = Some(self.subnets.clone());
        status.security_groups = Some(self.security_groups.clone());
        status.instance_profile.clone_from(&self.instance_profile);
        // None when nothing is selected, as Karpenter leaves it.
        status.capacity_reservations =
            (!self.capacity_reservations.is_empty()).then(|| self.capacity_reservations.clone());
    }
}

/// How a running instance differs from what its EC2NodeClass resolves to
/// now (the status the controller wrote from [`NodeClassResolution`]): its
/// image, subnet or security groups are no longer selected. Pure; both
/// providers' [`CloudProvider::is_drifted`] use it. Nothing is drifted on a
/// part the status does not report yet.
pub fn instance_drift(instance: &Instance, status: &EC2NodeClassStatus) -> Vec<DriftReason> {
    let mut out = Vec::new();
    if let (Some(image), Some(amis)) = (&instance.image_id, &status.amis)
        && !amis.is_empty()
        && !amis.iter().any(|a| &a.id == image)
    {
        out.push(DriftReason::Ami {
            image: image.clone(),
        });
    }
    if let (Some(subnet), Some(subnets)) = (&instance.subnet_id, &status.subnets)
        && !subnets.is_empty()
        && !subnets.iter().any(|s| &s.id == subnet)
    {
        out.push(DriftReason::Subnet {
            subnet: subnet.clone(),
        });
    }
    if let Some(groups) = &status.security_groups
        && !groups.is_empty()
        && !instance.security_group_ids.is_empty()
    {
        // The same sets (a handful of ids each), compared without building
        // them: checked for every NodeClaim at every disruption pass.
        let have = &instance.security_group_ids;
        let same = groups.iter().all(|g| have.contains(&g.id))
            && have.iter().all(|h| groups.iter().any(|g| &g.id == h));
        if !same {
            out.push(DriftReason::SecurityGroups {
                groups: instance.security_group_ids.clone(),
            });
        }
    }
    // Karpenter's isCapacityReservationDrifted: an instance in a
    // reservation the class no longer selects. Not while the class's
    // reservations failed to resolve: the status then lists none.
    let unresolved = crate::api::common::find_condition(
        status.conditions.as_deref(),
        "CapacityReservationsReady",
    )
    .is_some_and(|c| c.status == crate::api::common::ConditionStatus::False);
    if let Some(id) = instance
        .labels
        .get(crate::api::LABEL_CAPACITY_RESERVATION_ID)
        && !unresolved
        && !status
            .capacity_reservations
            .iter()
            .flatten()
            .any(|r| &r.id == id)
    {
        out.push(DriftReason::CapacityReservation { id: id.clone() });
    }
    out
}

/// Karpenter's isPlacementGroupDrifted: the claim's placement group (its
/// `karpenter.k8s.aws/placement-group-id` label) is not the one its class
/// resolves to now (`resolved`: none without a selector, or when the
/// selected group does not exist). A group that could not be looked up is
/// not compared (the caller does not call this).
pub fn placement_drift(claim: &NodeClaim, resolved: Option<&str>) -> Option<DriftReason> {
    let node = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::model::labels::PLACEMENT_GROUP_ID))
        .map(String::as_str);
    (node != resolved).then(|| DriftReason::PlacementGroup {
        node: node.map(str::to_string),
        class: resolved.map(str::to_string),
    })
}

/// Why a provider call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CloudError {
    /// No offering the NodeClaim allows could be launched. Lists the
    /// offerings that were tried and refused.
    #[error("insufficient capacity for {} offering(s)", offerings.len())]
    InsufficientCapacity { offerings: Vec<OfferingKey> },
    /// The instance does not exist (terminated and gone, or never existed).
    #[error("instance {0} not found")]
    NotFound(String),
    /// The NodeClaim's node class cannot be used yet or at all.
    #[error("node class {name} is not ready: {reason}")]
    NodeClassNotReady { name: String, reason: String },
    /// The NodeClaim cannot be launched as written (no instance type, bad
    /// requirements).
    #[error("invalid launch request: {0}")]
    InvalidRequest(String),
    /// Any other provider failure; retried with backoff.
    #[error("cloud provider error: {0}")]
    Api(String),
    /// The cloud kept throttling the call (`action`, the IAM action such
    /// as `ec2:CreateFleet`) through every retry.
    /// `attempts` 0: not sent, the action is cooling down after
    /// throttling.
    #[error("{action} throttled {}", throttled_note(*attempts))]
    Throttled { action: String, attempts: u32 },
    /// The controller's credentials may not call `action` (the IAM action
    /// its policy must allow).
    #[error("access denied: the controller's IAM policy must allow {action} ({message})")]
    AccessDenied { action: String, message: String },
}

/// How a throttled call ended, for messages.
pub fn throttled_note(attempts: u32) -> String {
    if attempts == 0 {
        "(not sent: backing off after throttling)".to_string()
    } else {
        format!("after {attempts} attempts")
    }
}

impl CloudError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CloudError::InsufficientCapacity { .. } => "insufficient_capacity",
            CloudError::NotFound(_) => "not_found",
            CloudError::NodeClassNotReady { .. } => "nodeclass_not_ready",
            CloudError::InvalidRequest(_) => "invalid_request",
            CloudError::Api(_) => "api",
            CloudError::Throttled { .. } => "throttled",
            CloudError::AccessDenied { .. } => "access_denied",
        }
    }
}

/// What the controller asks of a cloud.
pub trait CloudProvider: Send + Sync {
    /// Launches one instance for a NodeClaim: the cheapest available offering
    /// its requirements allow (instance types, zones, capacity types), with
    /// spot preferred where the NodeClaim allows it, never one of
    /// `unavailable` (offerings that recently had no capacity). Offerings
    /// the launch finds without capacity are skipped for the next cheapest
    /// and reported in [`Launched::refused`]; when none is left the error is
    /// [`CloudError::InsufficientCapacity`] listing them.
    fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
        unavailable: &BTreeSet<OfferingKey>,
    ) -> impl Future<Output = Result<Launched, CloudError>> + Send;

    /// Terminates an instance. Terminating an instance that is already gone
    /// is `NotFound`.
    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>> + Send;

    fn get(&self, provider_id: &str) -> impl Future<Output = Result<Instance, CloudError>> + Send;

    /// Every instance this provider launched that is not yet terminated.
    /// Shared: a provider that keeps its instances hands them out as they
    /// are.
    fn list(&self) -> impl Future<Output = Result<Vec<Arc<Instance>>, CloudError>> + Send;

    /// The instance types a NodePool may launch through its node class, with
    /// allocatable resources as that node class configures the kubelet, and
    /// current offerings (availability and prices).
    fn instance_types(
        &self,
        nodepool: &NodePool,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<Vec<InstanceType>, CloudError>> + Send;

    /// Resolves an EC2NodeClass's selector terms: its images (aliases for
    /// the cluster's Kubernetes version, per architecture and variant),
    /// subnets, security groups and instance profile.
    fn resolve_node_class(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<NodeClassResolution, CloudError>> + Send;

    /// How the instance of a launched NodeClaim differs from what its
    /// EC2NodeClass resolves to now (`nodeclass.status`, as written from
    /// [`CloudProvider::resolve_node_class`]): image, subnet, security
    /// groups. Empty when it does not drift.
    fn is_drifted(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<Vec<DriftReason>, CloudError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running m5.large of `capacity_type` with no labels, image, subnet
    /// or security groups.
    fn running(capacity_type: &str) -> Instance {
        Instance {
            id: "i-1".into(),
            provider_id: "aws:///us-east-1a/i-1".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: capacity_type.into(),
            price: 0.0,
            launched_at: Timestamp::UNIX_EPOCH,
            state: InstanceState::Running,
            nodeclaim: "a".into(),
            nodepool: "default".into(),
            labels: Arc::default(),
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
            launch_batch: Vec::new(),
            efa_attached: false,
        }
    }

    /// drift.go, areSecurityGroupsDrifted: the instance's groups against the
    /// class's resolved ones as sets (order and repeats aside); an extra or
    /// a missing group drifts.
    #[test]
    fn security_groups_drift_as_sets() {
        let instance = |groups: &[&str]| Instance {
            security_group_ids: groups.iter().map(|g| g.to_string()).collect(),
            ..running("on-demand")
        };
        let status: EC2NodeClassStatus = serde_json::from_value(serde_json::json!({
            "securityGroups": [{"id": "sg-1", "name": "a"}, {"id": "sg-2", "name": "b"}],
        }))
        .expect("a status");
        let drifted = |groups: &[&str]| !instance_drift(&instance(groups), &status).is_empty();
        assert!(!drifted(&["sg-1", "sg-2"]));
        assert!(!drifted(&["sg-2", "sg-1", "sg-2"]));
        assert!(drifted(&["sg-1"]));
        assert!(drifted(&["sg-1", "sg-2", "sg-3"]));
        assert!(drifted(&["sg-3", "sg-4"]));
        // An instance that reports no groups is not judged.
        assert!(!drifted(&[]));
    }

    /// drift.go, isCapacityReservationDrifted: a node in a reservation the
    /// class's status no longer lists drifts; one the status lists, or one
    /// in no reservation, does not; nor while the reservations failed to
    /// resolve.
    #[test]
    fn a_reservation_dropped_from_the_class_drifts_its_nodes() {
        let instance = |reservation: Option<&str>| Instance {
            labels: Arc::new(
                reservation
                    .map(|id| {
                        (
                            crate::api::LABEL_CAPACITY_RESERVATION_ID.to_string(),
                            id.to_string(),
                        )
                    })
                    .into_iter()
                    .collect(),
            ),
            ..running("reserved")
        };
        let held: CapacityReservation = serde_json::from_value(serde_json::json!({
            "availabilityZone": "us-east-1a", "id": "cr-1", "instanceMatchCriteria": "targeted",
            "instanceType": "m5.large", "ownerID": "123456789012",
        }))
        .expect("a reservation");
        let status = EC2NodeClassStatus {
            capacity_reservations: Some(vec![held]),
            ..Default::default()
        };
        assert!(instance_drift(&instance(Some("cr-1")), &status).is_empty());
        assert!(instance_drift(&instance(None), &status).is_empty());
        assert_eq!(
            instance_drift(&instance(Some("cr-2")), &status),
            [DriftReason::CapacityReservation { id: "cr-2".into() }]
        );
        let none = EC2NodeClassStatus::default();
        assert_eq!(instance_drift(&instance(Some("cr-1")), &none).len(), 1);
        let unresolved = EC2NodeClassStatus {
            conditions: Some(
                serde_json::from_value(serde_json::json!([{
                    "type": "CapacityReservationsReady", "status": "False",
                    "reason": "CapacityReservationResolutionFailed", "message": "throttled",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }]))
                .expect("conditions"),
            ),
            ..Default::default()
        };
        assert!(instance_drift(&instance(Some("cr-1")), &unresolved).is_empty());
    }
}
