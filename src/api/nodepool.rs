//! NodePool (`karpenter.sh/v1`): a template for the nodes Karpenter may
//! launch, with limits, a scheduling weight and the disruption policy.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, DURATION_OR_NEVER_PATTERN, DURATION_PATTERN, LABEL_VALUE_PATTERN,
    NodeClassReference, NodeSelectorRequirementWithMinValues, Taint, nodepool_requirements,
    quantity_value_schema, requirements_rules,
};

/// CEL rule of the NodePool template labels: the `karpenter.k8s.aws` label
/// domain is restricted. (The duplicated `capacity-reservation-interruptible`
/// entry is in the reference CRD.)
const RULE_LABELS_KARPENTER_AWS: &str = r#"self.all(x, x in ["karpenter.k8s.aws/instance-tenancy", "karpenter.k8s.aws/capacity-reservation-type", "karpenter.k8s.aws/capacity-reservation-id", "karpenter.k8s.aws/capacity-reservation-interruptible", "karpenter.k8s.aws/capacity-reservation-interruptible", "karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/instance-encryption-in-transit-supported", "karpenter.k8s.aws/instance-category", "karpenter.k8s.aws/instance-hypervisor", "karpenter.k8s.aws/instance-family", "karpenter.k8s.aws/instance-generation", "karpenter.k8s.aws/instance-local-nvme", "karpenter.k8s.aws/instance-size", "karpenter.k8s.aws/instance-cpu", "karpenter.k8s.aws/instance-cpu-manufacturer", "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz", "karpenter.k8s.aws/instance-memory", "karpenter.k8s.aws/instance-ebs-bandwidth", "karpenter.k8s.aws/instance-network-bandwidth", "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-count", "karpenter.k8s.aws/instance-gpu-memory", "karpenter.k8s.aws/instance-accelerator-name", "karpenter.k8s.aws/instance-accelerator-manufacturer", "karpenter.k8s.aws/instance-accelerator-count", "karpenter.k8s.aws/instance-capability-flex", "karpenter.k8s.aws/placement-group-id", "karpenter.k8s.aws/placement-group-partition"] || !x.find("^([^/]+)").endsWith("karpenter.k8s.aws"))"#;

/// The default disruption budget: at most 10% of the nodes at once.
pub const DEFAULT_BUDGET_NODES: &str = "10%";
/// The default `consolidateAfter` of a defaulted `disruption` block.
pub const DEFAULT_CONSOLIDATE_AFTER: &str = "0s";

/// The desired state of a NodePool.
// kube takes one `printcolumn(...)` per column; clippy reads the repeated
// `type_ = ...` inside them as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    singular = "nodepool",
    category = "karpenter",
    status = "NodePoolStatus",
    derive = "PartialEq",
    doc = "NodePool is the Schema for the NodePools API",
    annotation("controller-gen.kubebuilder.io/version", "v0.20.1"),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.template.spec.nodeClassRef.name"
    ),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".status.nodes"),
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
        name = "Weight",
        type_ = "integer",
        json_path = ".spec.weight",
        priority = 1
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.resources.cpu",
        priority = 1
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.resources.memory",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "message": "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        "rule": "has(self.replicas) == has(oldSelf.replicas)",
    },
    {
        "message": "only 'limits.nodes' is supported on static NodePools",
        "rule": "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
    },
    {
        "message": "'weight' is not supported on static NodePools",
        "rule": "!has(self.replicas) || !has(self.weight)",
    },
]))]
pub struct NodePoolSpec {
    /// The parameters of Karpenter's disruption logic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"consolidateAfter": DEFAULT_CONSOLIDATE_AFTER}))]
    pub disruption: Option<Disruption>,
    /// Bounds on the capacity this NodePool may provision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("additionalProperties" = quantity_value_schema()))]
    pub limits: Option<BTreeMap<String, Quantity>>,
    /// The fixed number of nodes of a static NodePool (alpha).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
    /// The template of the NodeClaims this NodePool launches.
    pub template: NodeClaimTemplate,
    /// The priority of this NodePool in scheduling; higher goes first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
}

/// The disruption policy of a NodePool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Budgets limiting how many NodeClaims may be disrupted at once; the
    /// most restrictive active budget wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    #[schemars(extend(
        "default" = [{"nodes": DEFAULT_BUDGET_NODES}],
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = [{"message": "'schedule' must be set with 'duration'", "rule": "self.all(x, has(x.schedule) == has(x.duration))"}],
    ))]
    pub budgets: Option<Vec<Budget>>,
    /// How long to wait before consolidating an underutilized node (or `Never`).
    #[schemars(pattern(DURATION_OR_NEVER_PATTERN))]
    pub consolidate_after: String,
    /// Which nodes consolidation may disrupt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "WhenEmptyOrUnderutilized"))]
    pub consolidation_policy: Option<ConsolidationPolicy>,
}

/// Which nodes consolidation may disrupt.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
    Balanced,
}

/// A limit on the number of NodeClaims that may be disrupted at once,
/// optionally active only during a schedule window.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = budget_schema)]
pub struct Budget {
    /// How long the budget is active after each schedule hit (minutes and hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"))]
    pub duration: Option<String>,
    /// The maximum number (or percentage) of NodeClaims terminating at once.
    #[serde(default = "default_budget_nodes")]
    #[schemars(pattern(r"^((100|[0-9]{1,2})%|[0-9]+)$"))]
    pub nodes: String,
    /// The disruption reasons this budget applies to; all when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "set"))]
    pub reasons: Option<Vec<DisruptionReason>>,
    /// When the budget becomes active, in cron syntax (no time zones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(
        r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
    ))]
    pub schedule: Option<String>,
}

fn default_budget_nodes() -> String {
    DEFAULT_BUDGET_NODES.to_string()
}

/// `nodes` is required in the CRD and defaults to 10%: the API server
/// defaults it before checking it is there.
fn budget_schema(schema: &mut schemars::Schema) {
    super::common::require_defaulted(schema, &["nodes"]);
    if let Some(nodes) = schema
        .pointer_mut("/properties/nodes")
        .and_then(serde_json::Value::as_object_mut)
    {
        nodes.insert("default".into(), DEFAULT_BUDGET_NODES.into());
    }
}

/// A disruption method a budget can be restricted to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
}

/// The template of the NodeClaims a NodePool launches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct NodeClaimTemplate {
    /// Labels and annotations of the NodeClaims (and their nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<NodeClaimTemplateMetadata>,
    /// The NodeClaim spec, without resource requests.
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations of a NodeClaim template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NodeClaimTemplateMetadata {
    /// Annotations of the NodeClaims and their nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-map-type" = "granular"))]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Labels of the NodeClaims and their nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN},
        "x-kubernetes-map-type" = "atomic",
        "maxProperties" = 100,
        "x-kubernetes-validations" = [
            {
                "message": r#"label domain "karpenter.sh" is restricted"#,
                "rule": r#"self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !x.find("^([^/]+)").endsWith("karpenter.sh"))"#,
            },
            {"message": r#"label "karpenter.sh/nodepool" is restricted"#, "rule": r#"self.all(x, x != "karpenter.sh/nodepool")"#},
            {"message": r#"label "kubernetes.io/hostname" is restricted"#, "rule": r#"self.all(x, x != "kubernetes.io/hostname")"#},
            {"message": r#"label domain "karpenter.k8s.aws" is restricted"#, "rule": RULE_LABELS_KARPENTER_AWS},
        ],
    ))]
    pub labels: Option<BTreeMap<String, String>>,
}

/// The NodeClaim spec of a NodePool template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// How long after the node is created the controller terminates it (or `Never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_OR_NEVER_PATTERN), extend("default" = super::DEFAULT_EXPIRE_AFTER))]
    pub expire_after: Option<String>,
    /// The object that defines provider-specific configuration. Its group
    /// and kind are immutable.
    #[schemars(extend("x-kubernetes-validations" = [
        {"message": "nodeClassRef.group is immutable", "rule": "self.group == oldSelf.group"},
        {"message": "nodeClassRef.kind is immutable", "rule": "self.kind == oldSelf.kind"},
    ]))]
    pub node_class_ref: NodeClassReference,
    /// Requirements layered with the labels and applied to every node.
    #[schemars(length(max = 100), transform = nodepool_requirements)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic", "x-kubernetes-validations" = requirements_rules()))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Taints applied at startup and expected to be removed by a daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub startup_taints: Option<Vec<Taint>>,
    /// Taints applied to the NodeClaims' nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub taints: Option<Vec<Taint>>,
    /// The maximum time the controller waits before forcefully deleting the
    /// pods on a node, measured from when deletion is first initiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub termination_grace_period: Option<String>,
}

/// The observed state of a NodePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Signals for health and readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-map-keys" = ["type"], "x-kubernetes-list-type" = "map"))]
    pub conditions: Option<Vec<Condition>>,
    /// The observed generation of the referenced node class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// The number of nodes associated with this NodePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// The resources provisioned by this NodePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("additionalProperties" = quantity_value_schema()))]
    pub resources: Option<BTreeMap<String, Quantity>>,
}

impl Disruption {
    /// The disruption block the API server fills in when it is omitted.
    pub fn defaulted() -> Self {
        let mut disruption = Disruption {
            budgets: None,
            consolidate_after: DEFAULT_CONSOLIDATE_AFTER.to_string(),
            consolidation_policy: None,
        };
        disruption.apply_defaults();
        disruption
    }

    fn apply_defaults(&mut self) {
        self.budgets.get_or_insert_with(|| {
            vec![Budget {
                duration: None,
                nodes: default_budget_nodes(),
                reasons: None,
                schedule: None,
            }]
        });
        self.consolidation_policy
            .get_or_insert_with(ConsolidationPolicy::default);
    }
}

impl NodePool {
    /// Fills in the defaults the API server would apply, so a value that
    /// spells out a default equals one that leaves it out.
    pub fn apply_defaults(&mut self) {
        let spec = &mut self.spec;
        spec.disruption
            .get_or_insert_with(Disruption::defaulted)
            .apply_defaults();
        spec.template
            .spec
            .expire_after
            .get_or_insert_with(|| super::DEFAULT_EXPIRE_AFTER.to_string());
        if let Some(status) = &mut self.status {
            status.nodes.get_or_insert(0);
        }
    }

    /// The scheduling weight; an unset weight counts as 0.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// Whether this is a static NodePool (`spec.replicas` set).
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// The requirements of the NodeClaim template.
    pub fn requirements(&self) -> &[NodeSelectorRequirementWithMinValues] {
        &self.spec.template.spec.requirements
    }

    /// The status condition of type `type_`, if reported.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        super::common::find_condition(self.status.as_ref()?.conditions.as_deref(), type_)
    }

    /// A minimal valid NodePool for tests and examples: on-demand capacity
    /// from the EC2NodeClass `default`.
    pub fn test(name: &str) -> Self {
        NodePool::new(
            name,
            NodePoolSpec {
                disruption: None,
                limits: None,
                replicas: None,
                template: NodeClaimTemplate {
                    metadata: None,
                    spec: NodeClaimTemplateSpec {
                        expire_after: None,
                        node_class_ref: NodeClassReference::ec2("default"),
                        requirements: vec![NodeSelectorRequirementWithMinValues::new(
                            super::LABEL_CAPACITY_TYPE,
                            super::Operator::In,
                            &[super::CAPACITY_TYPE_ON_DEMAND],
                        )],
                        startup_taints: None,
                        taints: None,
                        termination_grace_period: None,
                    },
                },
                weight: None,
            },
        )
    }

    /// Sets `spec.limits` from `(resource, quantity)` pairs.
    pub fn with_limits(mut self, limits: &[(&str, &str)]) -> Self {
        self.spec.limits = Some(
            limits
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        );
        self
    }

    /// Sets `spec.weight`.
    pub fn with_weight(mut self, weight: i32) -> Self {
        self.spec.weight = Some(weight);
        self
    }

    /// Appends a requirement to the template.
    pub fn with_requirement(mut self, requirement: NodeSelectorRequirementWithMinValues) -> Self {
        self.spec.template.spec.requirements.push(requirement);
        self
    }
}
