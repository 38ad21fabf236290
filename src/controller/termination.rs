//! Termination: a NodeClaim being deleted keeps the termination finalizer
//! until its node is drained, its instance is terminated and its node is
//! gone. A node deleted directly takes its NodeClaim with it.
//!
//! The drain taints the node `karpenter.sh/disrupted:NoSchedule` and evicts
//! its pods through the eviction API, so PodDisruptionBudgets hold (a 429
//! is retried with a backoff that doubles up to [`DRAIN_BACKOFF_MAX`]), in
//! the reference's order: non-critical pods, then non-critical DaemonSet
//! pods, then critical pods, then critical DaemonSet pods, each group only
//! once the one before is gone: an evicted pod still terminating holds its
//! group until it is gone, or until a minute past its deletionTimestamp
//! (the reference's "stuck terminating"). Critical means the
//! `system-cluster-critical` or `system-node-critical` priority class.
//! Mirror pods, finished pods and pods that tolerate the disrupted taint
//! (they would be scheduled straight back) are not evicted, and pods whose
//! `karpenter.sh/do-not-disrupt` is active (see
//! [`crate::disruption::pods`]) are left to the NodeClaim's
//! `terminationGracePeriod`.
//!
//! With a `terminationGracePeriod`, the node is gone by the NodeClaim's
//! deletion plus that period, whatever its pods ask: each pod still there
//! is deleted (not evicted: budgets no longer count) when what is left of
//! the period equals its own `terminationGracePeriodSeconds` (default
//! 30s), so it gets its full grace period before the deadline (the
//! reference's `DeleteExpiringPods`). Node repair brings the deadline
//! forward to the repair (`karpenter.sh/nodeclaim-termination-timestamp`):
//! every pod is deleted at once. Past the deadline, pods still
//! terminating no longer hold the node. A drain stops when the instance is
//! already gone (EC2 reclaimed or stopped it): the pods left are lost with
//! it, and the node is released.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use super::Controller;
use crate::api::{
    FINALIZER_TERMINATION, LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE, NodeClaim, SlimPod,
    label_or_empty,
};
use crate::clock::Timestamp;
use crate::cloud::{CloudError, CloudProvider};
use crate::cluster::{Cluster, ObjectKey};

/// How soon to look again while pods are still draining.
const DRAIN_POLL: Duration = Duration::from_secs(5);
/// The longest wait between evictions of a node refused by budgets.
pub const DRAIN_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Priority classes the reference drains last.
const CRITICAL_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// The drain group of a pod: lower groups are evicted first.
fn drain_group(pod: &SlimPod) -> u8 {
    let critical = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_CLASSES.contains(&c));
    let daemon = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    u8::from(critical) * 2 + u8::from(daemon)
}

/// A pod's own grace period: Kubernetes defaults it to 30 seconds.
fn pod_grace(pod: &SlimPod) -> Duration {
    let secs = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// When a deleting NodeClaim's `terminationGracePeriod` runs out: its
/// deletion plus the period, or the earlier termination timestamp node
/// repair stamps (`karpenter.sh/nodeclaim-termination-timestamp`); `None`
/// without either.
fn termination_deadline(claim: &NodeClaim) -> Option<Timestamp> {
    let stamped = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::repair::ANNOTATION_TERMINATION_TIMESTAMP))
        .and_then(|v| crate::clock::parse_rfc3339(v).ok());
    let grace = match claim
        .spec
        .termination_grace_period
        .as_deref()
        .map(|g| crate::timing::parse_duration(g, crate::timing::DurationSyntax::Hms))
    {
        Some(Ok(crate::timing::NillableDuration::After(d))) => Some(d),
        _ => None,
    };
    let by_grace = grace.and_then(|g| {
        claim
            .metadata
            .deletion_timestamp
            .as_ref()?
            .0
            .checked_add(g)
            .ok()
    });
    match (stamped, by_grace) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn claim_name(claim: &NodeClaim) -> String {
    claim.metadata.name.clone().unwrap_or_default()
}

fn has_finalizer(meta: &kube::api::ObjectMeta) -> bool {
    meta.finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER_TERMINATION)
}

/// How long past its deletionTimestamp a terminating pod still holds a
/// drain (the reference's `IsStuckTerminating`).
const STUCK_TERMINATING: Duration = Duration::from_secs(60);

/// Pods a drain must see gone (the reference's `IsWaitingEviction`): not
/// finished, not mirror pods, not pods that tolerate the disrupted taint,
/// and not terminating for more than a minute past their deletionTimestamp.
/// Past the NodeClaim's deadline (`grace_over`), terminating pods no longer
/// count.
fn waiting(pod: &SlimPod, now: Timestamp, grace_over: bool) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    if let Some(deleted) = &pod.metadata.deletion_timestamp {
        let terminating_for = Duration::try_from(now.duration_since(deleted.0)).unwrap_or_default();
        if terminating_for > STUCK_TERMINATING || grace_over {
            return false;
        }
    }
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    !mirror && !super::disruption::tolerates_disrupted(pod)
}

/// Among pods a drain waits for, those to evict now: not already
/// terminating, and not protected by `karpenter.sh/do-not-disrupt`.
fn evictable(pod: &SlimPod, now: Timestamp) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !crate::disruption::pods::is_protected(pod, now)
}

/// The `reason` of `karpenter_pods_drained_total`, as the reference's
/// terminator has it: the NodeClaim's `DisruptionReason` condition's
/// reason, else `Forceful Termination`.
fn drain_reason(claim: &NodeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == super::CONDITION_DISRUPTION_REASON && c.is_true())
        })
        .and_then(|c| c.reason.as_deref())
        .unwrap_or("Forceful Termination")
}

/// A drain's retry state, in memory: losing it after a restart only means
/// an eviction is retried sooner.
#[derive(Debug, Clone, Copy)]
pub(super) struct DrainBackoff {
    next: Timestamp,
    wait: Duration,
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    pub(super) async fn reconcile_termination(&mut self) -> Duration {
        let claims = self.cluster.list::<NodeClaim>();
        let nodes = self.cluster.list::<Node>();
        let mut next = self.settings.resync;

        // A node deleted directly (it carries our finalizer) takes its claim.
        let claim_by_node: HashMap<&str, &Arc<NodeClaim>> = claims
            .iter()
            .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c)))
            .collect();
        for node in nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_some())
        {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            match claim_by_node.get(name) {
                Some(claim) if claim.metadata.deletion_timestamp.is_none() => {
                    self.delete_claim(claim, "NodeDeleted", format!("node {name} was deleted"))
                        .await;
                    next = Duration::ZERO;
                }
                Some(_) => {}
                None if has_finalizer(&node.metadata) => {
                    let since = node.metadata.deletion_timestamp.as_ref().map(|t| t.0);
                    if self.release_node(node).await {
                        self.node_terminated(node, since);
                    }
                }
                None => {}
            }
        }

        let terminating: Vec<&Arc<NodeClaim>> = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_some() && has_finalizer(&c.metadata))
            .collect();
        if terminating.is_empty() {
            return next;
        }
        let nodes_by_name: HashMap<&str, &Arc<Node>> = nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
            .collect();
        let pods = self.cluster.list::<SlimPod>();
        let mut pods_by_node: HashMap<&str, Vec<&Arc<SlimPod>>> = HashMap::new();
        for p in &pods {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                pods_by_node.entry(n).or_default().push(p);
            }
        }
        let now = self.clock.now();
        for claim in terminating {
            let grace_over = termination_deadline(claim).is_some_and(|t| t <= now);
            let node = claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| nodes_by_name.get(n).copied());
            if let Some(node) = node {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                let draining: Vec<&Arc<SlimPod>> = pods_by_node
                    .get(name)
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|p| waiting(p, now, grace_over))
                    .collect();
                if !draining.is_empty() && !self.instance_gone(claim).await {
                    super::disruption::taint_disrupted(&*self.cluster, node).await;
                    let wait = self.drain(claim, &draining).await;
                    next = next.min(wait);
                    continue;
                }
                if self.drains.remove(&claim_name(claim)).is_some() {
                    self.metrics
                        .nodes_drained
                        .with_label_values(&[claim.nodepool_name().unwrap_or_default()])
                        .inc();
                }
            }
            if !self.terminate_instance(claim).await {
                next = next.min(DRAIN_POLL);
                continue;
            }
            if let Some(node) = node {
                // The node's termination began with its NodeClaim's
                // deletion (which deletes it), or its own if earlier.
                let since = [&claim.metadata, &node.metadata]
                    .iter()
                    .filter_map(|m| m.deletion_timestamp.as_ref().map(|t| t.0))
                    .min();
                if self.release_node(node).await {
                    self.node_terminated(node, since);
                }
                let key = ObjectKey::of(node.as_ref());
                let _ = self.cluster.delete::<Node>(&key).await;
            }
            self.remove_claim_finalizer(claim).await;
        }
        next
    }

    /// One step of a drain: deletes the pods whose time has come under the
    /// NodeClaim's `terminationGracePeriod`, and evicts the evictable pods
    /// of the first group still there. `pods` are those the drain waits
    /// for. Returns when to look again.
    async fn drain(&mut self, claim: &NodeClaim, pods: &[&Arc<SlimPod>]) -> Duration {
        let now = self.clock.now();
        let name = claim_name(claim);
        let drained = self
            .metrics
            .pods_drained
            .with_label_values(&[drain_reason(claim)]);
        let object = format!("NodeClaim/{name}");
        let mut next_delete: Option<Timestamp> = None;
        let mut deleted: Vec<&Arc<SlimPod>> = Vec::new();
        if let Some(deadline) = termination_deadline(claim) {
            for pod in pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
            {
                let at = deadline
                    .checked_sub(pod_grace(pod))
                    .unwrap_or(Timestamp::UNIX_EPOCH);
                if at > now {
                    next_delete = Some(next_delete.map_or(at, |n: Timestamp| n.min(at)));
                    continue;
                }
                let key = ObjectKey::of(pod.as_ref());
                match self.cluster.delete::<SlimPod>(&key).await {
                    Ok(_) => {
                        drained.inc();
                        let left = Duration::try_from(deadline.duration_since(now))
                            .unwrap_or_default()
                            .as_secs();
                        self.event(
                            format!("Pod/{key}"),
                            "Deleted",
                            format!(
                                "{object} must be gone in {left}s (its terminationGracePeriod, or node repair): deleted so it gets its own grace period before then"
                            ),
                        );
                        deleted.push(pod);
                    }
                    Err(e) if e.is_not_found() => deleted.push(pod),
                    Err(e) => self.event(
                        format!("Pod/{key}"),
                        "DeletionFailed",
                        format!("to drain {object}: {e}"),
                    ),
                }
            }
        }
        let until_delete = next_delete.map(|t| {
            Duration::try_from(t.duration_since(now))
                .unwrap_or(DRAIN_POLL)
                .max(Duration::from_secs(1))
        });
        let backoff = self.drains.get(&name).copied();
        if let Some(b) = backoff
            && b.next > now
        {
            let wait = Duration::try_from(b.next.duration_since(now)).unwrap_or(DRAIN_POLL);
            return until_delete.map_or(wait, |d| d.min(wait));
        }
        let left: Vec<&&Arc<SlimPod>> = pods
            .iter()
            .filter(|p| !deleted.iter().any(|d| Arc::ptr_eq(d, p)))
            .collect();
        let group = left.iter().map(|p| drain_group(p)).min().unwrap_or(0);
        let mut refused = false;
        for pod in left
            .iter()
            .filter(|p| drain_group(p) == group && evictable(p, now))
        {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            match self.cluster.evict(ns, pod_name).await {
                Ok(()) => {
                    drained.inc();
                    self.event(
                        format!("Pod/{ns}/{pod_name}"),
                        "Evicted",
                        format!("evicted to drain {object}"),
                    );
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    refused = true;
                    self.event(
                        object.clone(),
                        "EvictionBlocked",
                        format!("pod {ns}/{pod_name}: {e}"),
                    );
                }
            }
        }
        let wait = if refused {
            backoff.map_or(DRAIN_POLL, |b| (b.wait * 2).min(DRAIN_BACKOFF_MAX))
        } else {
            DRAIN_POLL
        };
        self.drains.insert(
            name,
            DrainBackoff {
                next: now.checked_add(wait).unwrap_or(now),
                wait,
            },
        );
        until_delete.map_or(wait, |d| d.min(wait))
    }

    /// Whether the claim's instance is already gone (EC2 reclaimed or
    /// stopped it): draining is then pointless, the pods left on the node
    /// are lost, and termination goes on to release the node.
    async fn instance_gone(&mut self, claim: &NodeClaim) -> bool {
        let Some(pid) = claim.status.as_ref().and_then(|s| s.provider_id.clone()) else {
            return false;
        };
        if !matches!(self.cloud.get(&pid).await, Err(CloudError::NotFound(_))) {
            return false;
        }
        let name = claim_name(claim);
        self.drains.remove(&name);
        self.event(
            format!("NodeClaim/{name}"),
            "DrainSkipped",
            format!("{pid} is gone; the pods left on its node are lost"),
        );
        true
    }

    /// Terminates the claim's instance; true once it is gone.
    async fn terminate_instance(&mut self, claim: &NodeClaim) -> bool {
        let Some(pid) = claim.status.as_ref().and_then(|s| s.provider_id.clone()) else {
            return true;
        };
        match self.cloud.delete(&pid).await {
            Ok(()) => {
                let name = format!(
                    "NodeClaim/{}",
                    claim.metadata.name.as_deref().unwrap_or_default()
                );
                self.event(name, "InstanceTerminated", format!("terminated {pid}"));
                true
            }
            Err(CloudError::NotFound(_)) => true,
            Err(e) => {
                let name = format!(
                    "NodeClaim/{}",
                    claim.metadata.name.as_deref().unwrap_or_default()
                );
                self.event(name, "TerminationFailed", e.to_string());
                false
            }
        }
    }

    /// Removes the termination finalizer from a node; whether this call
    /// removed it.
    async fn release_node(&mut self, node: &Node) -> bool {
        if !has_finalizer(&node.metadata) {
            return false;
        }
        let mut n = node.clone();
        if let Some(f) = n.metadata.finalizers.as_mut() {
            f.retain(|x| x != FINALIZER_TERMINATION);
        }
        self.cluster.replace(n).await.is_ok()
    }

    /// A node released: `karpenter_nodes_terminated_total`, and the time
    /// since its termination began (`since`) in
    /// `karpenter_nodes_termination_duration_seconds`.
    fn node_terminated(&self, node: &Node, since: Option<Timestamp>) {
        let label = |k: &str| label_or_empty(&node.metadata, k);
        let pool = label(LABEL_NODEPOOL);
        self.metrics
            .nodes_terminated
            .with_label_values(&[pool, label(LABEL_ZONE)])
            .inc();
        if let Some(since) = since {
            let secs = self
                .clock
                .now()
                .duration_since(since)
                .as_secs_f64()
                .max(0.0);
            self.metrics
                .node_termination_duration
                .observe(&[pool], secs);
        }
    }

    async fn remove_claim_finalizer(&mut self, claim: &NodeClaim) {
        let mut c = claim.clone();
        if let Some(f) = c.metadata.finalizers.as_mut() {
            f.retain(|x| x != FINALIZER_TERMINATION);
        }
        let name = format!(
            "NodeClaim/{}",
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        match self.cluster.replace(c).await {
            Ok(_) => {
                let label = |k: &str| label_or_empty(&claim.metadata, k);
                self.metrics
                    .nodeclaims_terminated
                    .with_label_values(&[
                        label(LABEL_NODEPOOL),
                        label(LABEL_CAPACITY_TYPE),
                        label(LABEL_ZONE),
                    ])
                    .inc();
                self.event(name, "Terminated", "node and instance released".into())
            }
            Err(e) => self.event(name, "TerminationFailed", e.to_string()),
        }
    }
}
