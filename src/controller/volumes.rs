//! Termination's wait for volume detachment, as Karpenter v1.14.1's
//! termination controller does it (`pkg/controllers/node/termination/
//! controller.go`: `awaitVolumeDetachment`, `pendingVolumeAttachments`,
//! `filterVolumeAttachments`).
//!
//! Once a node is drained, its instance is terminated only when every
//! `storage.k8s.io/v1` VolumeAttachment with `spec.nodeName` naming the
//! node is gone (the attach-detach controller deletes them once the
//! volumes are detached), so a pod that moves with its volume can attach
//! it elsewhere at once. Attachments without a `persistentVolumeName`, and
//! those of a PersistentVolume a pod on the node that is not drain-able
//! uses (Pod → PersistentVolumeClaim → its `volumeName`), are not waited
//! for: those pods stay, and so do their volumes. Drain-able is the
//! reference's `IsDrainable`: the pod does not tolerate the
//! `karpenter.sh/disrupted:NoSchedule` taint, is not stuck terminating (a
//! minute past its deletionTimestamp), and is not a static pod (owned by
//! its `v1` Node).
//!
//! While attachments are pending, the NodeClaim's `VolumesDetached`
//! condition is `Unknown` (`AwaitingVolumeDetachment`) and the Node gets an
//! `AwaitingVolumeDetachment` Event naming them; once none is left it is
//! `True`. When the NodeClaim's `terminationGracePeriod` has elapsed, the
//! wait stops: `False` with `TerminationGracePeriodElapsed`, and the
//! instance is terminated.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttachment;

use super::Controller;
use crate::api::common::ConditionStatus;
use crate::api::{NodeClaim, SlimPod};
use crate::clock::Timestamp;
use crate::cloud::CloudProvider;
use crate::cluster::{Cluster, ObjectKey};

/// The NodeClaim condition of the wait.
pub const CONDITION_VOLUMES_DETACHED: &str = "VolumesDetached";
/// Its reason while attachments are pending, and the Node Event's.
pub const AWAITING_VOLUME_DETACHMENT: &str = "AwaitingVolumeDetachment";
/// Its reason when the grace period ran out first.
pub const TERMINATION_GRACE_PERIOD_ELAPSED: &str = "TerminationGracePeriodElapsed";
/// How soon to look again while attachments are pending (the reference
/// requeues after a second; a deleted attachment wakes the pass anyway).
pub const VOLUME_POLL: Duration = Duration::from_secs(1);
/// How many attachment names the Event lists (`pretty.Slice(.., 5)`).
const NAMES_SHOWN: usize = 5;

/// The reference's `IsDrainable`: a pod whose volumes a drain moves.
fn drainable(pod: &SlimPod, now: Timestamp) -> bool {
    let stuck = crate::disruption::pods::stuck_at(pod).is_some_and(|t| now > t);
    let static_pod = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.api_version == "v1" && o.kind == "Node");
    !crate::disruption::pods::tolerates_disrupted(pod) && !stuck && !static_pod
}

/// The attachments on `node` termination waits for: those with a
/// PersistentVolume name that no pod on the node that is not drain-able
/// uses. `pods` are the pods bound to the node; `pvc` finds a claim by
/// namespace and name.
pub(super) fn pending_attachments<'a>(
    node: &str,
    attachments: &'a [Arc<VolumeAttachment>],
    pods: &[&Arc<SlimPod>],
    pvc: impl Fn(&ObjectKey) -> Option<Arc<PersistentVolumeClaim>>,
    now: Timestamp,
) -> Vec<&'a Arc<VolumeAttachment>> {
    let on_node: Vec<&Arc<VolumeAttachment>> = attachments
        .iter()
        .filter(|a| a.spec.node_name == node)
        .collect();
    if on_node.is_empty() {
        return on_node;
    }
    let mut kept: HashSet<String> = HashSet::new();
    for pod in pods.iter().filter(|p| !drainable(p, now)) {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        for v in pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
        {
            // volume.GetPersistentVolumeClaim: a generic ephemeral
            // volume's claim is named `<pod>-<volume>`.
            let claim = match (&v.persistent_volume_claim, &v.ephemeral) {
                (Some(c), _) => c.claim_name.clone(),
                (None, Some(_)) => format!("{pod_name}-{}", v.name),
                (None, None) => continue,
            };
            if let Some(c) = pvc(&ObjectKey::new(namespace, claim)) {
                kept.insert(
                    c.spec
                        .as_ref()
                        .and_then(|s| s.volume_name.clone())
                        .unwrap_or_default(),
                );
            }
        }
    }
    on_node
        .into_iter()
        .filter(|a| {
            a.spec
                .source
                .persistent_volume_name
                .as_ref()
                .is_some_and(|pv| !kept.contains(pv))
        })
        .collect()
}

/// The Event's message (`NodeAwaitingVolumeDetachmentEvent`): the first
/// five names, then how many others.
pub(super) fn awaiting_message(names: &[&str]) -> String {
    let mut list = names
        .iter()
        .take(NAMES_SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMES_SHOWN {
        list.push_str(&format!(" and {} other(s)", names.len() - NAMES_SHOWN));
    }
    format!("Awaiting deletion of bound volumeattachments ({list})")
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// The wait for the drained `node`'s volumes to detach. `None` when
    /// termination may go on (none pending, or the grace period elapsed);
    /// otherwise when to look again. `claim` is replaced by what the
    /// status write returned, so later writes carry its resourceVersion.
    pub(super) async fn await_volume_detachment(
        &mut self,
        claim: &mut Arc<NodeClaim>,
        node: &Node,
        pods: &[&Arc<SlimPod>],
        deadline: Option<Timestamp>,
    ) -> Option<Duration> {
        let now = self.clock.now();
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        let attachments = self.cluster.list::<VolumeAttachment>();
        let pending = pending_attachments(
            node_name,
            &attachments,
            pods,
            |k| self.cluster.get::<PersistentVolumeClaim>(k),
            now,
        );
        let names: Vec<&str> = pending
            .iter()
            .map(|a| a.metadata.name.as_deref().unwrap_or_default())
            .collect();
        let (status, reason, wait) = if names.is_empty() {
            (ConditionStatus::True, CONDITION_VOLUMES_DETACHED, None)
        } else if deadline.is_none_or(|d| now <= d) {
            let message = awaiting_message(&names);
            // One Event per change of what is pending (the reference
            // dedupes on the node).
            if self.volume_waits.get(node_name) != Some(&message) {
                self.volume_waits
                    .insert(node_name.to_string(), message.clone());
                self.event(
                    format!("Node/{node_name}"),
                    AWAITING_VOLUME_DETACHMENT,
                    message,
                );
            }
            (
                ConditionStatus::Unknown,
                AWAITING_VOLUME_DETACHMENT,
                Some(VOLUME_POLL),
            )
        } else {
            (
                ConditionStatus::False,
                TERMINATION_GRACE_PERIOD_ELAPSED,
                None,
            )
        };
        if wait.is_none() {
            self.volume_waits.remove(node_name);
        }
        // As operatorpkg writes them: `SetTrue` with the type as its
        // reason and no message; the others with the reason as message.
        let message = if status == ConditionStatus::True {
            ""
        } else {
            reason
        };
        self.write_claim_condition(claim, CONDITION_VOLUMES_DETACHED, status, reason, message)
            .await;
        wait
    }
}
