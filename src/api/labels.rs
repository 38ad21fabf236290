//! Well-known label, annotation, taint and finalizer keys of Karpenter and
//! Kubernetes, and the label values validation needs.

/// The value of the label `key` of an object, empty when it has none (as
/// a metric label takes it).
pub fn label_or_empty<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> &'a str {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

/// The label naming the NodePool a node was launched from.
pub const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
/// The label holding a node's capacity type (`on-demand`, `spot`, `reserved`).
pub const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// The label naming the EC2NodeClass of a node.
pub const LABEL_EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// Capacity type label value: on-demand instances.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Capacity type label value: spot instances.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
/// Capacity type label value: instances in a capacity reservation.
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// Every capacity type Karpenter knows.
pub const CAPACITY_TYPES: [&str; 3] = [
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_SPOT,
    CAPACITY_TYPE_RESERVED,
];

/// The label of a node launched into a capacity reservation: its id.
pub const LABEL_CAPACITY_RESERVATION_ID: &str = crate::model::labels::RESERVATION_ID;

/// The instance type label of a node.
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// The zone label of a node.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// The region label of a node.
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
/// The CPU architecture label of a node (`amd64`, `arm64`).
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
/// The operating system label of a node (`linux`, `windows`).
pub const LABEL_OS: &str = "kubernetes.io/os";
/// The hostname label of a node; NodePools may not set or require it.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// The Windows build label of a node.
pub const LABEL_WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

/// The instance category label (`c`, `m`, `r`, ...).
pub const LABEL_INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
/// The instance family label (`m5`, `c7g`, ...).
pub const LABEL_INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// The instance generation label (`5`, `7`, ...).
pub const LABEL_INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
/// The instance size label (`large`, `2xlarge`, ...).
pub const LABEL_INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
/// The vCPU count label.
pub const LABEL_INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// The memory label, in MiB.
pub const LABEL_INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";

/// The label domain Karpenter reserves for itself.
pub const DOMAIN_KARPENTER: &str = "karpenter.sh";
/// The label domain Karpenter's AWS provider reserves for itself.
pub const DOMAIN_KARPENTER_AWS: &str = "karpenter.k8s.aws";
/// The `karpenter.sh` labels a NodePool requirement may use.
pub const ALLOWED_KARPENTER_LABELS: [&str; 2] = [LABEL_CAPACITY_TYPE, LABEL_NODEPOOL];
/// The `karpenter.k8s.aws` labels NodePool requirements and template labels
/// may use (the list of the reference CRD's CEL rules).
pub const ALLOWED_KARPENTER_AWS_LABELS: [&str; 28] = [
    "karpenter.k8s.aws/instance-tenancy",
    "karpenter.k8s.aws/capacity-reservation-type",
    "karpenter.k8s.aws/capacity-reservation-id",
    "karpenter.k8s.aws/capacity-reservation-interruptible",
    LABEL_EC2NODECLASS,
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    LABEL_INSTANCE_CATEGORY,
    "karpenter.k8s.aws/instance-hypervisor",
    LABEL_INSTANCE_FAMILY,
    LABEL_INSTANCE_GENERATION,
    "karpenter.k8s.aws/instance-local-nvme",
    LABEL_INSTANCE_SIZE,
    LABEL_INSTANCE_CPU,
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    LABEL_INSTANCE_MEMORY,
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
    "karpenter.k8s.aws/instance-capability-flex",
    "karpenter.k8s.aws/placement-group-id",
    "karpenter.k8s.aws/placement-group-partition",
];

/// The annotation that protects a pod or node from voluntary disruption.
pub const ANNOTATION_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// The taint Karpenter puts on a node it is disrupting.
pub const TAINT_DISRUPTED: &str = "karpenter.sh/disrupted";
/// The taint a node carries until Karpenter has registered it.
pub const TAINT_UNREGISTERED: &str = "karpenter.sh/unregistered";
/// The Node label the reference sets when a NodeClaim's node registers.
pub const LABEL_REGISTERED: &str = "karpenter.sh/registered";
/// The Node label the reference sets when a NodeClaim's node is
/// initialised; the scheduler reads it.
pub const LABEL_INITIALIZED: &str = "karpenter.sh/initialized";
/// The finalizer Karpenter puts on nodes and NodeClaims.
pub const FINALIZER_TERMINATION: &str = "karpenter.sh/termination";

/// The condition type every Karpenter object reports readiness with.
pub const CONDITION_READY: &str = "Ready";
/// The NodeClaim condition set when the NodeClaim has drifted.
pub const CONDITION_DRIFTED: &str = "Drifted";

/// On a NodeClaim whose instance types a NodeOverlay priced: the reference
/// then launches by the overlaid prices (CreateFleet's `prioritized`
/// strategies) instead of EC2's own.
pub const ANNOTATION_PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
/// On a NodeClaim whose instance types a NodeOverlay gave capacity.
pub const ANNOTATION_CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";
/// dovetail's: a price-overlaid NodeClaim's instance types in the order
/// of their overlaid prices, cheapest first, comma-separated, which the
/// launch follows (the reference passes its overlaid offerings to the
/// cloud provider in memory; a NodeClaim carries them here).
pub const ANNOTATION_LAUNCH_PRIORITY: &str = "dovetail.dev/launch-priority";

#[cfg(test)]
mod tests {
    use super::*;

    /// The allowed AWS labels are the ones the CEL rules of the generated
    /// (and reference) CRDs allow.
    #[test]
    fn allowed_aws_labels_match_the_cel_rule() {
        let quoted: Vec<String> = ALLOWED_KARPENTER_AWS_LABELS
            .iter()
            .map(|l| format!("\"{l}\""))
            .collect();
        let expected = format!("self in [{}]", quoted.join(", "));
        assert!(
            super::super::common::RULE_KEY_KARPENTER_AWS.starts_with(&expected),
            "the allowed AWS labels differ from the requirement key rule"
        );
    }
}
