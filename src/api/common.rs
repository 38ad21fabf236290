//! Types shared by NodePool and NodeClaim (requirements, taints, the node
//! class reference, status conditions) and the schema fragments they share.
//!
//! The schema attributes reproduce the Karpenter v1.14.1 CRDs exactly; where
//! one Rust type appears under different schemas in different CRDs (the
//! requirement key rules of NodePool and NodeClaim, the condition schema of
//! NodeClaim) the owning field applies a `transform` from this module.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A Kubernetes resource quantity (`100m`, `4Gi`, `1e3`).
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// A qualified name, optionally prefixed by a DNS subdomain: a label or taint key.
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// A label value (possibly empty).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A Go duration of hours, minutes and seconds, or `Never`.
pub const DURATION_OR_NEVER_PATTERN: &str = r"^(([0-9]+(s|m|h))+|Never)$";
/// A Go duration of hours, minutes and seconds.
pub const DURATION_PATTERN: &str = r"^([0-9]+(s|m|h))+$";

/// CEL rule of the NodePool and NodeClaim requirement keys: the `karpenter.sh`
/// label domain is restricted.
pub(crate) const RULE_KEY_KARPENTER_SH: &str = r#"self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")"#;
/// CEL rule of requirement keys: `kubernetes.io/hostname` is restricted.
pub(crate) const RULE_KEY_HOSTNAME: &str = r#"self != "kubernetes.io/hostname""#;
/// CEL rule of requirement keys: the `karpenter.k8s.aws` label domain is restricted.
pub(crate) const RULE_KEY_KARPENTER_AWS: &str = r#"self in ["karpenter.k8s.aws/instance-tenancy", "karpenter.k8s.aws/capacity-reservation-type", "karpenter.k8s.aws/capacity-reservation-id", "karpenter.k8s.aws/capacity-reservation-interruptible", "karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/instance-encryption-in-transit-supported", "karpenter.k8s.aws/instance-category", "karpenter.k8s.aws/instance-hypervisor", "karpenter.k8s.aws/instance-family", "karpenter.k8s.aws/instance-generation", "karpenter.k8s.aws/instance-local-nvme", "karpenter.k8s.aws/instance-size", "karpenter.k8s.aws/instance-cpu", "karpenter.k8s.aws/instance-cpu-manufacturer", "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz", "karpenter.k8s.aws/instance-memory", "karpenter.k8s.aws/instance-ebs-bandwidth", "karpenter.k8s.aws/instance-network-bandwidth", "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-count", "karpenter.k8s.aws/instance-gpu-memory", "karpenter.k8s.aws/instance-accelerator-name", "karpenter.k8s.aws/instance-accelerator-manufacturer", "karpenter.k8s.aws/instance-accelerator-count", "karpenter.k8s.aws/instance-capability-flex", "karpenter.k8s.aws/placement-group-id", "karpenter.k8s.aws/placement-group-partition"] || !self.find("^([^/]+)").endsWith("karpenter.k8s.aws")"#;
/// CEL rule that only NodePool requirement keys carry: `karpenter.sh/nodepool`
/// is set by Karpenter itself.
pub(crate) const RULE_KEY_NODEPOOL: &str = r#"self != "karpenter.sh/nodepool""#;

/// The schema of a map value that is a resource quantity, as controller-gen
/// writes it for `resource.Quantity`.
pub(crate) fn quantity_value_schema() -> Value {
    json!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true,
    })
}

/// The rules shared by every list of requirements (NodePool template and NodeClaim).
pub(crate) fn requirements_rules() -> Value {
    json!([
        {
            "message": "requirements with operator 'In' must have a value defined",
            "rule": "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
        },
        {
            "message": "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
            "rule": "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
        },
        {
            "message": "requirements with 'minValues' must have at least that many values specified in the 'values' field",
            "rule": "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
        },
    ])
}

/// Schema transform for a NodePool's requirements: NodePool keys additionally
/// may not be `karpenter.sh/nodepool` (the rule sits second, as in Karpenter).
pub(crate) fn nodepool_requirements(schema: &mut Schema) {
    if let Some(Value::Array(rules)) = schema
        .get_mut("items")
        .and_then(|items| items.pointer_mut("/properties/key/x-kubernetes-validations"))
    {
        rules.insert(
            1,
            json!({"message": r#"label "karpenter.sh/nodepool" is restricted"#, "rule": RULE_KEY_NODEPOOL}),
        );
    }
}

/// Schema transform for NodeClaim conditions: Karpenter relaxes `reason` and
/// `message` there (both optional, `reason` may be empty).
pub(crate) fn nodeclaim_conditions(schema: &mut Schema) {
    let Some(items) = schema.get_mut("items").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(Value::Array(required)) = items.get_mut("required") {
        required.retain(|name| name != "message" && name != "reason");
    }
    if let Some(reason) = items
        .get_mut("properties")
        .and_then(|p| p.get_mut("reason"))
        .and_then(Value::as_object_mut)
    {
        reason.remove("minLength");
        reason.insert(
            "pattern".into(),
            r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$".into(),
        );
    }
}

/// Schema transform for structs whose fields in `names` are required by the
/// CRD although the Rust type lets them be absent when reading
/// (`#[serde(default)]` or `Option` makes schemars treat them as optional,
/// and write a `default` for the former).
pub(crate) fn require_defaulted(schema: &mut Schema, names: &[&str]) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for name in names {
            if let Some(Value::Object(property)) = properties.get_mut(*name) {
                property.remove("default");
            }
        }
    }
    let required = object
        .entry("required")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(required) = required {
        for name in names {
            if !required.iter().any(|r| r == name) {
                required.push((*name).into());
            }
        }
    }
}

fn condition_schema(schema: &mut Schema) {
    require_defaulted(schema, &["message", "reason"]);
}

/// Schema transform that drops the `format` schemars derives from a Rust
/// integer type, for the integer fields the reference declares without one.
pub(crate) fn no_format(schema: &mut Schema) {
    schema.remove("format");
}

/// Operators of a node selector requirement.
// The variant order follows the reference CRD's enum.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Operator {
    Gte,
    Lte,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

impl std::fmt::Display for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Operator {
    /// The operator as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
        }
    }
}

/// A node selector requirement with `minValues`: a key, an operator relating
/// the key to values, and the minimum number of distinct values required.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key that the selector applies to.
    #[schemars(length(max = 316), pattern(QUALIFIED_NAME_PATTERN))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"message": r#"label domain "karpenter.sh" is restricted"#, "rule": RULE_KEY_KARPENTER_SH},
        {"message": r#"label "kubernetes.io/hostname" is restricted"#, "rule": RULE_KEY_HOSTNAME},
        {"message": r#"label domain "karpenter.k8s.aws" is restricted"#, "rule": RULE_KEY_KARPENTER_AWS},
    ]))]
    pub key: String,
    /// The minimum number of unique values required to define the
    /// flexibility of the requirement (alpha).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50), transform = no_format)]
    pub min_values: Option<i64>,
    /// A key's relationship to a set of values.
    pub operator: Operator,
    /// The values. Non-empty for In and NotIn, empty for Exists and
    /// DoesNotExist, a single integer for Gt, Lt, Gte and Lte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "atomic",
        "maxLength" = 63,
        "pattern" = LABEL_VALUE_PATTERN,
    ))]
    pub values: Option<Vec<String>>,
}

impl NodeSelectorRequirementWithMinValues {
    /// A requirement `key operator values`.
    pub fn new(key: impl Into<String>, operator: Operator, values: &[&str]) -> Self {
        Self {
            key: key.into(),
            min_values: None,
            operator,
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    /// The values, empty when unset.
    pub fn values(&self) -> &[String] {
        self.values.as_deref().unwrap_or_default()
    }
}

/// The effect of a taint on pods that do not tolerate it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    /// The effect as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

impl std::fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A taint, with the validation Karpenter adds to the upstream type.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The effect of the taint on pods that do not tolerate it.
    pub effect: TaintEffect,
    /// The taint key to be applied to a node.
    #[schemars(length(min = 1), pattern(QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// The time at which the taint was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
    /// The taint value corresponding to the taint key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(QUALIFIED_NAME_PATTERN))]
    pub value: Option<String>,
}

impl Taint {
    /// A taint `key=value:effect` (no value when `value` is `None`).
    pub fn new(key: impl Into<String>, value: Option<&str>, effect: TaintEffect) -> Self {
        Self {
            effect,
            key: key.into(),
            time_added: None,
            value: value.map(str::to_string),
        }
    }
}

/// A reference to the object that holds provider-specific configuration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct NodeClassReference {
    /// API group of the referent.
    #[schemars(pattern(r"^[^/]*$"))]
    #[schemars(extend("x-kubernetes-validations" = [{"message": "group may not be empty", "rule": "self != ''"}]))]
    pub group: String,
    /// Kind of the referent.
    #[schemars(extend("x-kubernetes-validations" = [{"message": "kind may not be empty", "rule": "self != ''"}]))]
    pub kind: String,
    /// Name of the referent.
    #[schemars(extend("x-kubernetes-validations" = [{"message": "name may not be empty", "rule": "self != ''"}]))]
    pub name: String,
}

impl NodeClassReference {
    /// A reference to the EC2NodeClass `name`.
    pub fn ec2(name: impl Into<String>) -> Self {
        Self {
            group: crate::api::GROUP_KARPENTER_AWS.to_string(),
            kind: crate::api::ApiKind::EC2NodeClass.kind().to_string(),
            name: name.into(),
        }
    }
}

/// The status of a condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// A status condition, as Karpenter's `status.Condition` writes it.
// `message` and `reason` are required in NodePool and EC2NodeClass status but
// optional in NodeClaim status; they are `Option`s so that an object reads and
// writes back unchanged either way. (Plain comment: doc comments become the
// CRD's descriptions.)
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = condition_schema)]
pub struct Condition {
    /// The last time the condition transitioned from one status to another.
    pub last_transition_time: Time,
    /// A human readable message about the transition; may be empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32768))]
    pub message: Option<String>,
    /// The `.metadata.generation` that the condition was set based upon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// A programmatic identifier for the reason of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[schemars(pattern(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"))]
    pub reason: Option<String>,
    /// The status of the condition.
    pub status: ConditionStatus,
    /// The type of the condition, in CamelCase or `foo.example.com/CamelCase`.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    #[schemars(pattern(
        r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
    ))]
    pub type_: String,
}

impl Condition {
    /// The message, empty when unset.
    pub fn message(&self) -> &str {
        self.message.as_deref().unwrap_or_default()
    }

    /// The reason, empty when unset.
    pub fn reason(&self) -> &str {
        self.reason.as_deref().unwrap_or_default()
    }

    /// Whether the condition's status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Finds the condition of type `type_` in a list of conditions.
pub fn find_condition<'a>(
    conditions: Option<&'a [Condition]>,
    type_: &str,
) -> Option<&'a Condition> {
    conditions?.iter().find(|c| c.type_ == type_)
}
