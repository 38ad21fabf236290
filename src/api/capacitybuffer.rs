//! CapacityBuffer (`autoscaling.x-k8s.io/v1beta1`, as Karpenter v1.14.1
//! serves it): spare capacity kept for placeholder pods of a PodTemplate or
//! a scalable workload. Kept under the `CapacityBuffer` feature gate by
//! `controller::buffers` (the rules are `crate::buffers`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Condition, quantity_value_schema};

/// The desired characteristics of a buffer.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    plural = "capacitybuffers",
    singular = "capacitybuffer",
    shortname = "cb",
    category = "autoscaling",
    namespaced,
    status = "CapacityBufferStatus",
    derive = "PartialEq",
    annotation("controller-gen.kubebuilder.io/version", "v0.20.1"),
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.provisioningStrategy",
        description = "The strategy to be used."
    ),
    printcolumn(
        name = "PodTemplate",
        type_ = "string",
        json_path = ".status.podTemplateRef.name",
        description = "The name of the PodTemplate used."
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "The actual number of buffer chunks."
    ),
    printcolumn(
        name = "ConditionsType",
        type_ = "string",
        json_path = ".status.conditions[*].type",
        description = "List of all condition types."
    ),
    printcolumn(
        name = "ConditionsStatus",
        type_ = "string",
        json_path = ".status.conditions[*].status",
        description = "List of all condition statuses."
    ),
    printcolumn(
        name = "ConditionsReason",
        type_ = "string",
        json_path = ".status.conditions[*].reason",
        description = "List of all condition reasons."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "The age of the CapacityBuffer."
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"message": "If podTemplateRef is set, replicas or limits must also be set", "rule": "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)"},
    {"message": "You must define either PodTemplateRef or ScalableRef, but not both", "rule": "!(has(self.podTemplateRef) && has(self.scalableRef))"},
]))]
pub struct CapacityBufferSpec {
    /// Resource totals that bound the number of chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("additionalProperties" = quantity_value_schema()))]
    pub limits: Option<BTreeMap<String, Quantity>>,
    /// Chunks as a percentage of the `scalableRef`'s replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// The PodTemplate, in the same namespace, of one chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// How the buffer is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "buffer.x-k8s.io/active-capacity"))]
    pub provisioning_strategy: Option<String>,
    /// The number of chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// A workload with a scale subresource whose pods shape one chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
}

/// A reference to an object in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct LocalObjectRef {
    /// The name of the referent.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A reference to an object with a scale subresource.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// The API group of the referent; empty for the core group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// The kind of the referent.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// The name of the referent.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The observed state of a buffer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The buffer's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-map-keys" = ["type"], "x-kubernetes-list-type" = "map"))]
    pub conditions: Option<Vec<Condition>>,
    /// The PodTemplate generation observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    /// The PodTemplate used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// The strategy in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    /// The number of chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// The strategy the reference acts on, and the default.
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

impl CapacityBuffer {
    /// The defaults the API server applies (`spec.provisioningStrategy`).
    pub fn apply_defaults(&mut self) {
        self.spec
            .provisioning_strategy
            .get_or_insert_with(|| ACTIVE_CAPACITY.to_string());
    }
}
