//! NodeClaim (`karpenter.sh/v1`): a request for one node, created by
//! Karpenter from a NodePool's template.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, DURATION_OR_NEVER_PATTERN, DURATION_PATTERN, NodeClassReference,
    NodeSelectorRequirementWithMinValues, Taint, nodeclaim_conditions, quantity_value_schema,
    requirements_rules,
};

/// The desired state of a NodeClaim. The spec is immutable.
// kube takes one `printcolumn(...)` per column; clippy reads the repeated
// `type_ = ...` inside them as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    singular = "nodeclaim",
    category = "karpenter",
    status = "NodeClaimStatus",
    derive = "PartialEq",
    doc = "NodeClaim is the Schema for the NodeClaims API",
    annotation("controller-gen.kubebuilder.io/version", "v0.20.1"),
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = r".metadata.labels.node\.kubernetes\.io/instance-type"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = r".metadata.labels.karpenter\.sh/capacity-type"
    ),
    printcolumn(
        name = "Zone",
        type_ = "string",
        json_path = r".metadata.labels.topology\.kubernetes\.io/zone"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "ImageID",
        type_ = "string",
        json_path = ".status.imageID",
        priority = 1
    ),
    printcolumn(
        name = "ID",
        type_ = "string",
        json_path = ".status.providerID",
        priority = 1
    ),
    printcolumn(
        name = "NodePool",
        type_ = "string",
        json_path = r".metadata.labels.karpenter\.sh/nodepool",
        priority = 1
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.nodeClassRef.name",
        priority = 1
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Drifted")].status"#,
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"message": "spec is immutable", "rule": "self == oldSelf"}]))]
pub struct NodeClaimSpec {
    /// How long after the node is created the controller terminates it (or `Never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_OR_NEVER_PATTERN), extend("default" = "720h"))]
    pub expire_after: Option<String>,
    /// The object that defines provider-specific configuration.
    pub node_class_ref: NodeClassReference,
    /// Requirements layered with the labels and applied to every node.
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic", "x-kubernetes-validations" = requirements_rules()))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The resource requirements the NodeClaim must launch with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<NodeClaimResources>,
    /// Taints applied at startup and expected to be removed by a daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub startup_taints: Option<Vec<Taint>>,
    /// Taints applied to the NodeClaim's node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub taints: Option<Vec<Taint>>,
    /// The maximum time the controller waits before forcefully deleting the
    /// pods on a node, measured from when deletion is first initiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub termination_grace_period: Option<String>,
}

/// The resource requests of a NodeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NodeClaimResources {
    /// The minimum resources required for the NodeClaim to launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("additionalProperties" = quantity_value_schema()))]
    pub requests: Option<BTreeMap<String, Quantity>>,
}

/// The observed state of a NodeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// The estimated allocatable capacity of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("additionalProperties" = quantity_value_schema()))]
    pub allocatable: Option<BTreeMap<String, Quantity>>,
    /// The estimated full capacity of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("additionalProperties" = quantity_value_schema()))]
    pub capacity: Option<BTreeMap<String, Quantity>>,
    /// Signals for health and readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = nodeclaim_conditions)]
    #[schemars(extend("x-kubernetes-list-map-keys" = ["type"], "x-kubernetes-list-type" = "map"))]
    pub conditions: Option<Vec<Condition>>,
    /// The identifier of the image that runs on the node.
    #[serde(rename = "imageID", default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The last time a pod was scheduled on or removed from the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
    /// The name of the corresponding Node object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The provider ID of the corresponding Node object.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
}

impl NodeClaim {
    /// Fills in the defaults the API server would apply (`expireAfter: 720h`).
    pub fn apply_defaults(&mut self) {
        self.spec
            .expire_after
            .get_or_insert_with(|| super::DEFAULT_EXPIRE_AFTER.to_string());
    }

    /// The name of the NodePool this NodeClaim was launched from (its
    /// `karpenter.sh/nodepool` label).
    pub fn nodepool_name(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(super::LABEL_NODEPOOL)
            .map(String::as_str)
    }

    /// The status condition of type `type_`, if reported.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        super::common::find_condition(self.status.as_ref()?.conditions.as_deref(), type_)
    }

    /// A minimal valid NodeClaim for tests and examples: one `In` requirement
    /// on the capacity type, referring to the EC2NodeClass `default`.
    pub fn test(name: &str) -> Self {
        NodeClaim::new(
            name,
            NodeClaimSpec {
                expire_after: None,
                node_class_ref: NodeClassReference::ec2("default"),
                requirements: vec![NodeSelectorRequirementWithMinValues::new(
                    super::LABEL_CAPACITY_TYPE,
                    super::Operator::In,
                    &[super::CAPACITY_TYPE_ON_DEMAND],
                )],
                resources: None,
                startup_taints: None,
                taints: None,
                termination_grace_period: None,
            },
        )
    }
}
