//! NodeOverlay (`karpenter.sh/v1alpha1`): adjusts the price or adds
//! extended-resource capacity of the instance types its requirements
//! select, in scheduling simulations. Applied under the `NodeOverlay`
//! feature gate by `model::overlay` (through `convert::apply_overlays`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, LABEL_VALUE_PATTERN, Operator, QUALIFIED_NAME_PATTERN, RULE_KEY_HOSTNAME,
    RULE_KEY_KARPENTER_SH, quantity_value_schema,
};

/// The desired state of a NodeOverlay.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    singular = "nodeoverlay",
    shortname = "overlays",
    category = "karpenter",
    status = "NodeOverlayStatus",
    derive = "PartialEq",
    annotation("controller-gen.kubebuilder.io/version", "v0.20.1"),
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
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"message": "cannot set both 'price' and 'priceAdjustment'", "rule": "!has(self.price) || !has(self.priceAdjustment)"},
]))]
pub struct NodeOverlaySpec {
    /// Extended resources added to the capacity of matching instance types
    /// (never cpu, memory, ephemeral-storage or pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = quantity_value_schema(),
        "x-kubernetes-validations" = [{"message": "invalid resource restricted", "rule": "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))"}],
    ))]
    pub capacity: Option<BTreeMap<String, Quantity>>,
    /// A fixed price for matching instance types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^\d+(\.\d+)?$"))]
    pub price: Option<String>,
    /// A price change for matching instance types: a signed amount, or a
    /// percentage (`+10%`, `-15%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(
        r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
    ))]
    pub price_adjustment: Option<String>,
    /// Which instance types (and NodePools) the overlay applies to.
    #[schemars(length(max = 100))]
    #[schemars(extend(
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = [
            {"message": "requirements with operator 'NotIn' must have a value defined", "rule": "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)"},
            {"message": "requirements with operator 'In' must have a value defined", "rule": "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)"},
            {"message": "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value", "rule": "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)"},
        ],
    ))]
    pub requirements: Vec<OverlayRequirement>,
    /// Precedence among overlays that match the same instance type; higher wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// A node selector requirement of a NodeOverlay.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverlayRequirement {
    /// The label key that the selector applies to.
    #[schemars(length(max = 316), pattern(QUALIFIED_NAME_PATTERN))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"message": r#"label domain "karpenter.sh" is restricted"#, "rule": RULE_KEY_KARPENTER_SH},
        {"message": r#"label "kubernetes.io/hostname" is restricted"#, "rule": RULE_KEY_HOSTNAME},
    ]))]
    pub key: String,
    /// A key's relationship to a set of values.
    pub operator: Operator,
    /// The values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "atomic",
        "maxLength" = 63,
        "pattern" = LABEL_VALUE_PATTERN,
    ))]
    pub values: Option<Vec<String>>,
}

/// The observed state of a NodeOverlay.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NodeOverlayStatus {
    /// Signals for health and readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-map-keys" = ["type"], "x-kubernetes-list-type" = "map"))]
    pub conditions: Option<Vec<Condition>>,
}
