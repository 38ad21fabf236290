//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`), pure: how many chunks
//! a buffer keeps, the virtual pods that stand for them, and what a solve
//! says about them, as Karpenter v1.14.1 computes them under its
//! `CapacityBuffer` feature gate (`pkg/controllers/capacitybuffer`,
//! `pkg/state/virtualpods`, `pkg/controllers/provisioning/buffers.go`).
//!
//! - **Replicas**: `spec.replicas` and, for a `scalableRef`, `percentage`
//!   of the workload's replicas (rounded up, at least one), the larger of
//!   the two; `limits` cap them (how many pods of the template fit in the
//!   limits, resource by resource, rounded down), or alone decide when
//!   neither is set.
//! - **Virtual pods**: that many copies of the template's pod, named
//!   `capacity-buffer-<buffer>-<i>` in the buffer's namespace, marked with
//!   the reference's annotations, at the lowest priority, without a node or
//!   persistent volumes. They are never created: every solve places them
//!   with the pending pods, so they keep room that real pods (which
//!   kube-scheduler binds straight away, never seeing them) then take, and
//!   the next solve finds them room again: the buffer refills.
//! - **Status**: `ReadyForProvisioning` (the template resolved) and, after
//!   each solve, `Provisioning` (`FitsExistingCapacity`,
//!   `RequiresNewCapacity`, `NotReadyForProvisioning`, `BufferEmpty`).
//!
//! The controller (`controller::buffers`) resolves the references, writes
//! the status and hands the virtual pods to the provisioner and the
//! disruption pass.
//!
//! This module depends only on `api`, `model` and `scheduling`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodCondition, PodTemplateSpec};
use kube::api::ObjectMeta;

use crate::api::capacitybuffer::CapacityBuffer;
use crate::api::{SlimPod, SlimPodSpec, SlimPodStatus};
use crate::model::Resources;
use crate::model::quantity::PODS;
use crate::scheduling::SolveResult;

/// The annotation that marks a virtual pod (the reference's).
pub const FAKE_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// The buffer a virtual pod belongs to: its name...
pub const BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";
/// ...and its namespace.
pub const BUFFER_NAMESPACE_ANNOTATION: &str = "karpenter.sh/capacity-buffer-namespace";
/// The priority of virtual pods: the lowest there is.
pub const VIRTUAL_POD_PRIORITY: i32 = i32::MIN;

/// Condition types.
pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
pub const PROVISIONING: &str = "Provisioning";

/// Reasons of `ReadyForProvisioning`.
pub const REASON_RESOLVED: &str = "Resolved";
pub const REASON_SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
pub const REASON_POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
pub const REASON_RESOLUTION_FAILED: &str = "ResolutionFailed";

/// Reasons of `Provisioning`.
pub const REASON_FITS_EXISTING_CAPACITY: &str = "FitsExistingCapacity";
pub const REASON_REQUIRES_NEW_CAPACITY: &str = "RequiresNewCapacity";
pub const REASON_NOT_READY_FOR_PROVISIONING: &str = "NotReadyForProvisioning";
pub const REASON_BUFFER_EMPTY: &str = "BufferEmpty";

/// How many pods of `requests` fit in `limits`: for every resource both
/// name (and the pod requests more than zero of), the limit divided by the
/// request, rounded down; the smallest. `None` when no resource is in
/// both: the limits constrain nothing. A pod's `pods` count is not a
/// request here.
pub fn limit_replicas(limits: &Resources, requests: &Resources) -> Option<i32> {
    let mut fewest: Option<i64> = None;
    for (name, limit) in &limits.0 {
        if name == PODS {
            continue;
        }
        let request = requests.get(name);
        if request <= 0 {
            continue;
        }
        let n = (*limit).max(0) / request;
        fewest = Some(fewest.map_or(n, |f| f.min(n)));
    }
    fewest.map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

/// `percentage` of a workload's `replicas`, rounded up, and at least one
/// when both are above zero.
pub fn percentage_replicas(replicas: i32, percentage: i32) -> i32 {
    if replicas <= 0 || percentage <= 0 {
        return 0;
    }
    let n = (i64::from(replicas) * i64::from(percentage) + 99) / 100;
    i32::try_from(n.max(1)).unwrap_or(i32::MAX)
}

/// A buffer's chunks: the larger of `replicas` and the percentage's count
/// (`percentage`, computed from the workload), capped by what fits in
/// `limits`; with neither, as many as fit in the limits (none without
/// limits that constrain).
pub fn replicas(
    spec_replicas: Option<i32>,
    percentage: Option<i32>,
    limits: Option<&Resources>,
    requests: &Resources,
) -> i32 {
    let sizes: Vec<i32> = spec_replicas.into_iter().chain(percentage).collect();
    let desired = sizes.iter().copied().max();
    match (desired, limits.and_then(|l| limit_replicas(l, requests))) {
        (Some(d), Some(l)) => d.min(l),
        (Some(d), None) => d,
        (None, Some(l)) => l,
        (None, None) => 0,
    }
}

/// Whether a pod is a buffer's virtual pod.
pub fn is_virtual(pod: &SlimPod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FAKE_POD_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// `namespace/name` of the buffer a virtual pod belongs to; `None` for a
/// real pod or a virtual one missing either annotation.
pub fn buffer_of(pod: &SlimPod) -> Option<String> {
    if !is_virtual(pod) {
        return None;
    }
    let a = pod.metadata.annotations.as_ref()?;
    let ns = a
        .get(BUFFER_NAMESPACE_ANNOTATION)
        .filter(|s| !s.is_empty())?;
    let name = a.get(BUFFER_NAME_ANNOTATION).filter(|s| !s.is_empty())?;
    Some(format!("{ns}/{name}"))
}

/// The pod spec of a virtual pod: the template's, without a node and
/// without the volumes that claim storage (a virtual pod's claims would
/// never exist), at the lowest priority.
pub fn sanitize(spec: &SlimPodSpec) -> SlimPodSpec {
    let mut spec = spec.clone();
    spec.node_name = None;
    if let Some(volumes) = &mut spec.volumes {
        volumes.retain(|v| v.persistent_volume_claim.is_none() && v.ephemeral.is_none());
    }
    if spec.volumes.as_ref().is_some_and(Vec::is_empty) {
        spec.volumes = None;
    }
    spec.priority = Some(VIRTUAL_POD_PRIORITY);
    spec.priority_class_name = None;
    spec
}

/// The virtual pods of a buffer with `status.replicas` chunks of
/// `template`: deterministic names and uids (`<buffer uid>-<i>`), the
/// template's labels (topology spread and affinity count them), pending
/// and unschedulable.
pub fn virtual_pods(buffer: &CapacityBuffer, template: &PodTemplateSpec) -> Vec<SlimPod> {
    let count = buffer.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    if count <= 0 {
        return Vec::new();
    }
    let name = buffer.metadata.name.clone().unwrap_or_default();
    let namespace = buffer
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let uid = buffer.metadata.uid.clone().unwrap_or_default();
    let spec = sanitize(
        &template
            .spec
            .as_ref()
            .map(SlimPodSpec::from)
            .unwrap_or_default(),
    );
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    (1..=count)
        .map(|i| SlimPod {
            metadata: ObjectMeta {
                name: Some(format!("capacity-buffer-{name}-{i}")),
                namespace: Some(namespace.clone()),
                uid: Some(format!("{uid}-{i}")),
                labels: labels.clone(),
                annotations: Some(BTreeMap::from([
                    (FAKE_POD_ANNOTATION.to_string(), "true".to_string()),
                    (BUFFER_NAME_ANNOTATION.to_string(), name.clone()),
                    (BUFFER_NAMESPACE_ANNOTATION.to_string(), namespace.clone()),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(spec.clone()),
            status: Some(SlimPodStatus {
                phase: Some("Pending".into()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    ..PodCondition::default()
                }]),
                ..SlimPodStatus::default()
            }),
        })
        .collect()
}

/// Where a solve put one buffer's virtual pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placed {
    /// On existing nodes (and NodeClaims already in flight).
    pub existing: usize,
    /// On NodeClaims the solve creates.
    pub new_claims: usize,
    /// Nowhere.
    pub failed: usize,
}

/// Where a solve put each buffer's virtual pods: `buffers` maps a virtual
/// pod's key (`namespace/name`) to its buffer's; real pods are not in it.
pub fn classify(
    result: &SolveResult,
    buffers: &BTreeMap<String, String>,
) -> BTreeMap<String, Placed> {
    let mut out: BTreeMap<String, Placed> = BTreeMap::new();
    let mut count = |pod: &str, f: fn(&mut Placed)| {
        if let Some(b) = buffers.get(pod) {
            f(out.entry(b.clone()).or_default());
        }
    };
    for e in &result.existing {
        for p in &e.pods {
            count(p, |s| s.existing += 1);
        }
    }
    for c in &result.nodeclaims {
        for p in &c.pods {
            count(p, |s| s.new_claims += 1);
        }
    }
    for u in &result.unschedulable {
        count(&u.pod, |s| s.failed += 1);
    }
    out
}

/// How many virtual pods a solve put on each existing node: those nodes
/// keep a buffer's room, so they are not empty (the reference's
/// `bufferPodCounts`, which only emptiness reads).
pub fn counts_by_node(
    result: &SolveResult,
    buffers: &BTreeMap<String, String>,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &result.existing {
        let pods: Vec<String> = e
            .pods
            .iter()
            .filter(|p| buffers.contains_key(*p))
            .cloned()
            .collect();
        if !pods.is_empty() {
            out.entry(e.node.clone()).or_default().extend(pods);
        }
    }
    out
}

/// The `Provisioning` condition a solve gives a buffer: (status, reason,
/// message), or `None` to leave it as it is (ready, but the solve saw none
/// of its pods, or they landed only partly and on existing capacity).
pub fn provisioning_condition(
    ready: bool,
    replicas: Option<i32>,
    placed: Option<&Placed>,
) -> Option<(bool, &'static str, String)> {
    if !ready {
        return Some((
            false,
            REASON_NOT_READY_FOR_PROVISIONING,
            "Buffer is not ReadyForProvisioning".into(),
        ));
    }
    let desired = replicas.unwrap_or(0);
    if desired == 0 {
        return Some((
            false,
            REASON_BUFFER_EMPTY,
            "Buffer has zero desired replicas".into(),
        ));
    }
    let p = placed?;
    if p.new_claims > 0 || p.failed > 0 {
        return Some((
            false,
            REASON_REQUIRES_NEW_CAPACITY,
            format!(
                "{}/{desired} virtual pods required new capacity, {} failed",
                p.new_claims, p.failed
            ),
        ));
    }
    let desired = usize::try_from(desired).unwrap_or(0);
    (p.existing == desired && desired > 0).then(|| {
        (
            true,
            REASON_FITS_EXISTING_CAPACITY,
            format!("All {desired} virtual pods fit on existing capacity"),
        )
    })
}

#[cfg(test)]
mod tests;
