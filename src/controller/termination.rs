//! Termination: a NodeClaim being deleted keeps the termination finalizer
//! until its node is drained, its instance is terminated and its node is
//! gone. A node deleted directly takes its NodeClaim with it.
//!
//! The drain follows Karpenter v1.14.1's terminator
//! (`pkg/controllers/node/termination/terminator/terminator.go`, `Drain`,
//! with the pod predicates of `pkg/utils/pod/scheduling.go`). It taints the
//! node `karpenter.sh/disrupted:NoSchedule` and evicts its pods through
//! the eviction API, so PodDisruptionBudgets hold (each pod is queued once
//! in [`super::eviction::EvictionQueue`], which retries a refused eviction
//! per pod from 100 ms, doubling to 10 s, as the reference's eviction
//! queue, `eviction.go`, does), in
//! the reference's order: non-critical pods, then non-critical DaemonSet
//! pods, then critical pods, then critical DaemonSet pods
//! (`groupPodsByPriority`). Critical means the `system-cluster-critical` or
//! `system-node-critical` priority class. A group is evicted only once
//! every pod of the groups before it is gone: an evicted pod is deleted
//! gracefully and stays, terminating, until its kubelet has stopped it, and
//! it holds its group (and the node) until then, or until a minute past
//! its `deletionTimestamp` (`IsStuckTerminating`: the timestamp is the end
//! of its grace period, the minute is for a kubelet that never confirms).
//! Mirror pods, finished pods and pods that tolerate the disrupted taint
//! (they would be scheduled straight back) are not waited for
//! (`IsWaitingEviction`), and pods whose `karpenter.sh/do-not-disrupt` is
//! active (see [`crate::disruption::pods`]) are waited for but not evicted
//! (`IsEvictable`): they are left to the NodeClaim's
//! `terminationGracePeriod`.
//!
//! With a `terminationGracePeriod`, the node is gone by the NodeClaim's
//! deletion plus that period, whatever its pods ask (`DeleteExpiringPods`):
//! each pod still there is deleted (not evicted: budgets no longer count)
//! once what is left of the period is at most its own
//! `terminationGracePeriodSeconds` (default 30s), with the time left as the
//! delete's grace period (at least 1 s), so it gets its full grace period
//! before the deadline; a pod already terminating whose grace period ends
//! after the deadline (`IsPodEligibleForForcedEviction`) is deleted again
//! with the time left. Node repair brings the deadline forward to the
//! repair (`karpenter.sh/nodeclaim-termination-timestamp`): every pod is
//! deleted at once with a grace period of 1 s. The instance is terminated,
//! and the Node deleted, only once no pod is waited for any more
//! (`controller.go`: `awaitDrain` before `awaitInstanceTermination`), and
//! its volumes are detached ([`super::volumes`]: `awaitVolumeDetachment`
//! between the two). A
//! drain stops when the instance is already gone (EC2 reclaimed or stopped
//! it): the pods left are lost with it, and the node is released.
//!
//! EC2 is eventually consistent: for some seconds after a launch it may
//! answer `InvalidInstanceID.NotFound` for the new instance. Within
//! [`LISTING_LAG`] of a NodeClaim's launch, an instance the cloud does not
//! know is taken to be not listed yet, never gone: the drain goes on, and
//! the termination is tried again rather than taken as done (which would
//! leave the instance running, with no NodeClaim, until garbage
//! collection).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use super::{Controller, conditions};
use crate::api::common::ConditionStatus;
use crate::api::{
    FINALIZER_TERMINATION, LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE, NodeClaim, SlimPod,
    label_or_empty,
};
use crate::clock::Timestamp;
use crate::cloud::{CloudError, CloudProvider};
use crate::cluster::{Cluster, DeleteOutcome, DeleteParams, ObjectKey};

/// How soon to look again while pods are still draining.
const DRAIN_POLL: Duration = Duration::from_secs(5);
/// How long after a NodeClaim's launch an instance the cloud does not know
/// may still be on its way into the cloud's listing.
pub const LISTING_LAG: Duration = Duration::from_secs(60);
/// How long `Drained` stays Unknown at least (Karpenter's `MinDrainTime`):
/// a pod bound to the node just before the scheduler saw its taint is
/// drained too.
const MIN_DRAIN_TIME: Duration = Duration::from_secs(5);

/// Priority classes the reference drains last.
const CRITICAL_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// The drain group of a pod: lower groups are evicted first.
fn drain_group(pod: &SlimPod) -> u8 {
    let critical = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_CLASSES.contains(&c));
    u8::from(critical) * 2 + u8::from(pod.is_daemon())
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

/// Whether the claim was launched less than [`LISTING_LAG`] before `now`.
fn launched_lately(claim: &NodeClaim, now: Timestamp) -> bool {
    crate::api::common::find_condition(
        claim.status.as_ref().and_then(|s| s.conditions.as_deref()),
        conditions::LAUNCHED,
    )
    .filter(|c| c.is_true())
    .and_then(|c| Duration::try_from(now.duration_since(c.last_transition_time.0)).ok())
    .is_some_and(|age| age < LISTING_LAG)
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

/// Pods a drain must see gone (the reference's `IsWaitingEviction`): not
/// finished, not mirror pods, not pods that tolerate the disrupted taint,
/// and not terminating for more than a minute past their deletionTimestamp
/// (the end of their grace period).
fn waiting(pod: &SlimPod, now: Timestamp) -> bool {
    if pod.is_finished() {
        return false;
    }
    if crate::disruption::pods::stuck_at(pod).is_some_and(|stuck| now > stuck) {
        return false;
    }
    let mirror = crate::disruption::pods::is_mirror(pod);
    !mirror && !crate::disruption::pods::tolerates_disrupted(pod)
}

/// Whether a pod the drain waits for is to be deleted before the
/// NodeClaim's deadline (the reference's `Drain` picks them for
/// `DeleteExpiringPods`): not terminating yet, or terminating with a grace
/// period that ends after the deadline (`IsPodEligibleForForcedEviction`).
fn expiring(pod: &SlimPod, deadline: Timestamp) -> bool {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .is_none_or(|t| t.0 > deadline)
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

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    pub(super) async fn reconcile_termination(&mut self) -> Duration {
        let claims = self.cluster.list::<NodeClaim>();
        let nodes = self.cluster.list::<Node>();
        let mut next = self.settings.resync;

        // A node deleted directly (it carries our finalizer) takes its claim.
        // (The claims by node are found only when a node is being deleted.)
        let deleted: Vec<&Arc<Node>> = nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_some())
            .collect();
        let claim_by_node: HashMap<&str, &Arc<NodeClaim>, foldhash::fast::RandomState> =
            match deleted.is_empty() {
                true => HashMap::default(),
                false => claims
                    .iter()
                    .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c)))
                    .collect(),
            };
        for node in deleted {
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
            return next.min(self.process_evictions().await);
        }
        let nodes_by_name: HashMap<&str, &Arc<Node>, foldhash::fast::RandomState> = nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
            .collect();
        let pods_by_node = self.pods_by_node();
        let now = self.clock.now();
        for claim in terminating {
            let mut claim = claim.clone();
            let node = claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| nodes_by_name.get(n).copied());
            if let Some(node) = node {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                let draining: Vec<&Arc<SlimPod>> =
                    pods_by_node.on(name).filter(|p| waiting(p, now)).collect();
                let gone = !draining.is_empty() && self.instance_gone(&claim).await;
                if let Some(deadline) = termination_deadline(&claim).filter(|_| !gone) {
                    let by = format!(
                        "All pods will be deleted by {}",
                        crate::clock::format_rfc3339(deadline)
                    );
                    self.event_deduped(
                        format!("Node/{name}"),
                        "TerminationGracePeriodExpiring",
                        by.clone(),
                    );
                    self.event_deduped(
                        format!("NodeClaim/{}", claim_name(&claim)),
                        "TerminationGracePeriodExpiring",
                        by,
                    );
                }
                if !draining.is_empty() && !gone {
                    self.event_deduped(
                        format!("Node/{name}"),
                        "FailedDraining",
                        format!(
                            "Failed to drain node, {} pods are waiting to be evicted",
                            draining.len()
                        ),
                    );
                    super::taints::taint_terminating(&*self.cluster, node).await;
                    if claim.condition(conditions::DRAINED).is_none() {
                        self.write_claim_condition(
                            &mut claim,
                            conditions::DRAINED,
                            ConditionStatus::Unknown,
                            "Draining",
                            "Draining",
                        )
                        .await;
                    }
                    let wait = self.drain(&claim, &draining).await;
                    next = next.min(wait);
                    continue;
                }
                if self.drains.remove(&claim_name(&claim)) {
                    self.metrics
                        .nodes_drained
                        .with_label_values(&[claim.nodepool_name().unwrap_or_default()])
                        .inc();
                }
                // awaitVolumeDetachment, between the drain and the
                // instance's termination (pointless once it is gone).
                if !gone {
                    // Karpenter's MinDrainTime: `Drained` stays Unknown for
                    // 5 s, for pods bound just before the taint was seen.
                    let since = claim
                        .condition(conditions::DRAINED)
                        .filter(|c| c.status == ConditionStatus::Unknown)
                        .map(|c| c.last_transition_time.0);
                    if claim.condition(conditions::DRAINED).is_none() {
                        self.write_claim_condition(
                            &mut claim,
                            conditions::DRAINED,
                            ConditionStatus::Unknown,
                            "Draining",
                            "Draining",
                        )
                        .await;
                        next = next.min(MIN_DRAIN_TIME);
                        continue;
                    }
                    if let Some(since) = since {
                        let left = MIN_DRAIN_TIME.saturating_sub(
                            Duration::try_from(now.duration_since(since)).unwrap_or_default(),
                        );
                        if !left.is_zero() {
                            next = next.min(left);
                            continue;
                        }
                    }
                    self.write_claim_condition(
                        &mut claim,
                        conditions::DRAINED,
                        ConditionStatus::True,
                        conditions::DRAINED,
                        "",
                    )
                    .await;
                    let on_node: Vec<&Arc<SlimPod>> = pods_by_node.on(name).collect();
                    let deadline = termination_deadline(&claim);
                    if let Some(wait) = self
                        .await_volume_detachment(&mut claim, node, &on_node, deadline)
                        .await
                    {
                        next = next.min(wait);
                        continue;
                    }
                }
            }
            if !self.terminate_instance(&claim).await {
                next = next.min(DRAIN_POLL);
                continue;
            }
            self.write_claim_condition(
                &mut claim,
                conditions::INSTANCE_TERMINATING,
                ConditionStatus::True,
                conditions::INSTANCE_TERMINATING,
                "",
            )
            .await;
            let claim = &claim;
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
        next.min(self.process_evictions().await)
    }

    /// One step of a drain: deletes the pods whose time has come under the
    /// NodeClaim's `terminationGracePeriod`, and evicts the evictable pods
    /// of the first group that still has a pod it waits for. `pods` are
    /// those the drain waits for. Returns when to look again.
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
            for pod in pods.iter().filter(|p| expiring(p, deadline)) {
                // terminator.go, podDeleteTimeWithGracePeriod: the pod's
                // own grace period before the deadline.
                let at = deadline
                    .checked_sub(pod_grace(pod))
                    .unwrap_or(Timestamp::UNIX_EPOCH);
                if at > now {
                    next_delete = Some(next_delete.map_or(at, |n: Timestamp| n.min(at)));
                    continue;
                }
                // DeleteExpiringPods: the time left as the grace period, at
                // least 1 s (0 would remove the pod before its containers
                // stopped).
                let left = deadline.duration_since(now).as_secs().max(1);
                let key = ObjectKey::of(pod.as_ref());
                let params = DeleteParams::with_grace_period(left);
                match self.cluster.delete_with::<SlimPod>(&key, &params).await {
                    Ok(outcome) => {
                        deleted.push(pod);
                        let moved = match &outcome {
                            DeleteOutcome::Deleted(_) => true,
                            DeleteOutcome::Terminating(p) => {
                                p.metadata.deletion_timestamp != pod.metadata.deletion_timestamp
                            }
                        };
                        if !moved {
                            continue;
                        }
                        drained.inc();
                        self.event(
                            format!("Pod/{key}"),
                            "Deleted",
                            format!(
                                "{object} must be gone in {left}s (its terminationGracePeriod, or node repair): deleted with a grace period of {left}s so it gets its own grace period before then"
                            ),
                        );
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
        let until = |t: Timestamp| {
            Duration::try_from(t.duration_since(now))
                .unwrap_or(DRAIN_POLL)
                .max(Duration::from_secs(1))
        };
        let until_delete = next_delete.map(until);
        // The first group with a pod still there holds the drain, its
        // terminating and protected pods included (terminator.go: the
        // groups of `IsWaitingEviction` pods; only `IsEvictable` ones are
        // queued for eviction).
        let group = pods.iter().map(|p| drain_group(p)).min().unwrap_or(0);
        let to_evict: Vec<&&Arc<SlimPod>> = pods
            .iter()
            .filter(|p| drain_group(p) == group && evictable(p, now))
            .filter(|p| !deleted.iter().any(|d| Arc::ptr_eq(d, p)))
            .collect();
        self.drains.insert(name.clone());
        // Each pod to evict is queued once; the queue evicts it and retries
        // it on its own schedule (`eviction.rs`). The drain looks again when
        // a pod changes (an eviction accepted, a pod gone), for pods stuck
        // terminating, and at the next deletion under the deadline.
        let reason = drain_reason(claim).to_string();
        for pod in &to_evict {
            self.evictions.add(pod, &name, &reason, now);
        }
        let protected = pods
            .iter()
            .any(|p| p.metadata.deletion_timestamp.is_none() && !self.evictions.contains(p));
        let stuck = pods
            .iter()
            .filter_map(|p| crate::disruption::pods::stuck_at(p))
            .min();
        let mut wait = stuck.map_or(self.settings.resync, |t| {
            until(t.checked_add(Duration::from_secs(1)).unwrap_or(t))
        });
        if protected || !to_evict.is_empty() {
            wait = wait.min(DRAIN_POLL);
        }
        until_delete.map_or(wait, |d| d.min(wait))
    }

    /// Evicts the queued pods that are due, unless something else runs the
    /// queue; returns when the next is due.
    pub(super) async fn process_evictions(&mut self) -> Duration {
        if self.evictions_elsewhere || self.evictions.is_empty() {
            return Duration::MAX;
        }
        let events = self
            .evictions
            .process(
                self.cluster.as_ref(),
                self.clock.as_ref(),
                &self.metrics,
                super::eviction::EVICTION_CONCURRENCY,
            )
            .await;
        for e in &events {
            tracing::info!(object = %e.object, reason = %e.reason, "{}", e.message);
        }
        self.events.extend(events);
        let now = self.clock.now();
        self.evictions.next_due().map_or(Duration::MAX, |t| {
            Duration::try_from(t.duration_since(now)).unwrap_or_default()
        })
    }

    /// Whether the claim's instance is already gone (EC2 reclaimed or
    /// stopped it): draining is then pointless, the pods left on the node
    /// are lost, and termination goes on to release the node.
    async fn instance_gone(&mut self, claim: &NodeClaim) -> bool {
        let Some(pid) = claim.status.as_ref().and_then(|s| s.provider_id.clone()) else {
            return false;
        };
        if launched_lately(claim, self.clock.now())
            || !matches!(self.cloud.get(&pid).await, Err(CloudError::NotFound(_)))
        {
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
            Err(CloudError::NotFound(_)) if launched_lately(claim, self.clock.now()) => {
                self.event_deduped(
                    format!("NodeClaim/{}", claim_name(claim)),
                    "TerminationWaiting",
                    format!("{pid} is not listed yet (launched less than {}s ago); terminating it again shortly", LISTING_LAG.as_secs()),
                );
                false
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

#[cfg(test)]
mod tests {
    //! The drain's rules against the in-memory cluster: Karpenter v1.14.1's
    //! node/termination suite_test.go and terminator/suite_test.go cases
    //! about evictions, terminating pods and `terminationGracePeriod`.

    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
    use k8s_openapi::api::storage::v1::VolumeAttachment;

    use super::*;
    use crate::clock::Clock;
    use crate::cloud::{Instance, InstanceState};
    use crate::cluster::Selector;
    use crate::controller::Settings;
    use crate::testing::{Env, TestPod, World, from_yaml, pod};
    use std::collections::BTreeMap;

    const PROVIDER_ID: &str = "aws:///us-east-1a/i-0123";

    /// A node `n1` of NodeClaim `c1` on a running instance; the claim's
    /// `terminationGracePeriod` if given.
    /// A running pod on `n1` with a grace period of its own.
    fn on_n1(name: &str, grace: i64) -> TestPod {
        pod("default", name).on("n1").grace(grace).running()
    }

    fn env(grace: Option<&str>) -> Env {
        let w = World::new();
        let cluster = &w.cluster;
        let node: Node = from_yaml(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n1, labels: {{karpenter.sh/nodepool: general}}, finalizers: [karpenter.sh/termination]}}\nspec: {{providerID: \"{PROVIDER_ID}\"}}\nstatus:\n  conditions: [{{type: Ready, status: \"True\"}}]\n"
        ));
        cluster.create(node).unwrap();
        let grace = grace.map_or(String::new(), |g| {
            format!("  terminationGracePeriod: {g}\n")
        });
        let claim: NodeClaim = from_yaml(&format!(
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: c1, labels: {{karpenter.sh/nodepool: general}}, finalizers: [karpenter.sh/termination]}}\nspec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  requirements: []\n{grace}"
        ));
        let claim = cluster.create(claim).unwrap();
        let mut with_status = (*claim).clone();
        with_status.status = Some(crate::api::nodeclaim::NodeClaimStatus {
            node_name: Some("n1".into()),
            provider_id: Some(PROVIDER_ID.into()),
            ..Default::default()
        });
        cluster.update_status(with_status).unwrap();
        w.cloud
            .adopt(Instance {
                id: String::new(),
                provider_id: PROVIDER_ID.into(),
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
                capacity_type: "on-demand".into(),
                price: 0.0,
                launched_at: Timestamp::UNIX_EPOCH,
                state: InstanceState::Running,
                nodeclaim: "c1".into(),
                nodepool: "general".into(),
                labels: Default::default(),
                image_id: None,
                subnet_id: None,
                security_group_ids: Vec::new(),
                launch_batch: Vec::new(),
                efa_attached: false,
            })
            .unwrap();
        w.env(Settings {
            resync: Duration::from_secs(3600),
            ..Settings::default()
        })
    }

    /// The termination pass with the node's kubelet after it, and what
    /// they leave of the node, its pods and its instance.
    trait Drain {
        fn at(&self) -> i64;
        fn pass_with(&mut self, kubelet: Kubelet) -> Duration;
        fn run_until_with(&mut self, until: i64, kubelet: Kubelet);
        fn pods(&self) -> Vec<Arc<Pod>>;
        fn pod(&self, name: &str) -> Option<Arc<Pod>>;
        fn ends(&self, name: &str) -> Option<i64>;
        fn instance_runs(&self) -> bool;
        fn node_exists(&self) -> bool;
        fn delete_claim(&self);

        /// One termination pass, then the kubelet's part; when to look
        /// again.
        fn pass(&mut self) -> Duration {
            self.pass_with(Kubelet::Confirms)
        }

        /// Passes every second up to `until` seconds.
        fn run_until(&mut self, until: i64) {
            self.run_until_with(until, Kubelet::Confirms)
        }
    }

    /// Whether the node's kubelet deletes the pods whose grace period
    /// ended.
    #[derive(Clone, Copy, PartialEq)]
    enum Kubelet {
        Confirms,
        NeverConfirms,
    }

    impl Drain for Env {
        fn at(&self) -> i64 {
            self.clock.now().as_second()
        }

        fn pass_with(&mut self, kubelet: Kubelet) -> Duration {
            let wait = self.rt.block_on(self.controller.reconcile_termination());
            if kubelet == Kubelet::Confirms {
                let now = self.clock.now();
                for p in self.pods() {
                    if p.metadata
                        .deletion_timestamp
                        .as_ref()
                        .is_some_and(|t| t.0 <= now)
                    {
                        self.cluster
                            .delete_with::<Pod>(
                                &ObjectKey::of(p.as_ref()),
                                &DeleteParams::with_grace_period(0),
                            )
                            .unwrap();
                    }
                }
            }
            wait
        }

        fn run_until_with(&mut self, until: i64, kubelet: Kubelet) {
            while self.at() < until {
                self.pass_with(kubelet);
                self.advance(Duration::from_secs(1));
            }
            self.pass_with(kubelet);
        }

        fn pods(&self) -> Vec<Arc<Pod>> {
            self.cluster
                .list::<Pod>(None, &Selector::everything())
                .items
        }

        fn pod(&self, name: &str) -> Option<Arc<Pod>> {
            self.cluster
                .get_opt::<Pod>(&ObjectKey::new("default", name))
        }

        /// When the pod's deletion ends (its deletionTimestamp), in seconds.
        fn ends(&self, name: &str) -> Option<i64> {
            Some(
                self.pod(name)?
                    .metadata
                    .deletion_timestamp
                    .as_ref()?
                    .0
                    .as_second(),
            )
        }

        fn instance_runs(&self) -> bool {
            self.cloud
                .instances_now()
                .iter()
                .any(|i| i.provider_id == PROVIDER_ID && i.state == InstanceState::Running)
        }

        fn node_exists(&self) -> bool {
            self.cluster
                .get_opt::<Node>(&ObjectKey::cluster("n1"))
                .is_some()
        }

        fn delete_claim(&self) {
            self.cluster
                .delete::<NodeClaim>(&ObjectKey::cluster("c1"))
                .unwrap();
        }
    }

    /// node/termination: MinDrainTime. An empty node's NodeClaim is
    /// `Drained=Unknown` for 5 s before `True`, and its instance is
    /// terminated only then.
    #[test]
    fn an_empty_node_is_drained_for_the_minimum_drain_time() {
        let mut e = env(None);
        e.delete_claim();
        e.pass();
        let drained = |e: &Env| {
            e.cluster
                .get_opt::<NodeClaim>(&ObjectKey::cluster("c1"))
                .and_then(|c| c.condition(conditions::DRAINED).map(|c| c.status))
        };
        assert_eq!(drained(&e), Some(ConditionStatus::Unknown));
        e.run_until(4);
        assert!(
            e.instance_runs(),
            "terminated before the minimum drain time"
        );
        e.run_until(6);
        assert!(!e.instance_runs());
    }

    /// node/termination: a drain that waits says so on the Node
    /// (`FailedDraining`, Karpenter's words), at most every 2 minutes.
    #[test]
    fn a_waiting_drain_says_how_many_pods_it_waits_for() {
        let mut e = env(None);
        e.cluster.create(on_n1("a", 300).build()).unwrap();
        e.cluster.create(on_n1("b", 300).build()).unwrap();
        e.delete_claim();
        e.run_until(150);
        let failed: Vec<_> = e
            .controller
            .drain_events()
            .into_iter()
            .filter(|ev| ev.reason == "FailedDraining")
            .collect();
        assert_eq!(
            failed.len(),
            2,
            "once, then again after 2 minutes: {failed:?}"
        );
        assert_eq!(failed[0].object, "Node/n1");
        assert_eq!(
            failed[0].message,
            "Failed to drain node, 2 pods are waiting to be evicted"
        );
    }

    /// terminator/suite_test.go: "should evict pods in order and wait
    /// until pods are fully deleted", "should evict non-critical pods
    /// first"; node/termination: "should not delete nodes until all pods
    /// are deleted".
    #[test]
    fn termination_writes_drained_then_instance_terminating_as_the_reference() {
        let mut e = env(None);
        e.cluster.create(on_n1("app", 30).build()).unwrap();
        e.delete_claim();
        e.run_until(40);
        assert!(!e.instance_runs());
        // Every version of c1 the API server stored, in order: the
        // conditions' (type, status, reason) as each first appeared or
        // changed.
        let mut seen: Vec<(String, String, String)> = Vec::new();
        for ev in e.cluster.watch_from::<NodeClaim>(0).unwrap() {
            if ev.object.metadata.name.as_deref() != Some("c1") {
                continue;
            }
            for c in ev
                .object
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
            {
                let t = (
                    c.type_.clone(),
                    format!("{:?}", c.status),
                    c.reason.clone().unwrap_or_default(),
                );
                if !seen.contains(&t) {
                    seen.push(t);
                }
            }
        }
        let of = |ty: &str| -> Vec<(String, String)> {
            seen.iter()
                .filter(|t| t.0 == ty)
                .map(|t| (t.1.clone(), t.2.clone()))
                .collect()
        };
        assert_eq!(
            of("Drained"),
            [
                ("Unknown".to_string(), "Draining".to_string()),
                ("True".to_string(), "Drained".to_string())
            ],
            "{seen:?}"
        );
        assert_eq!(
            of("InstanceTerminating"),
            [("True".to_string(), "InstanceTerminating".to_string())]
        );
        let at = |ty: &str, st: &str| seen.iter().position(|t| t.0 == ty && t.1 == st);
        assert!(
            at("Drained", "True") < at("VolumesDetached", "True"),
            "{seen:?}"
        );
        assert!(at("VolumesDetached", "True") < at("InstanceTerminating", "True"));
    }

    #[test]
    fn each_group_is_evicted_once_the_pods_of_the_one_before_are_gone() {
        let mut e = env(None);
        e.cluster.create(on_n1("app", 120).build()).unwrap();
        e.cluster
            .create(on_n1("logs", 30).owned_by("DaemonSet", "ds").build())
            .unwrap();
        e.cluster
            .create(
                on_n1("dns", 10)
                    .priority_class("system-node-critical")
                    .build(),
            )
            .unwrap();
        e.delete_claim();

        e.pass();
        assert_eq!(
            e.ends("app"),
            Some(120),
            "evicted with its own grace period"
        );
        assert_eq!(e.ends("logs"), None, "waits for the group before");
        // While the application pod stops, nothing else moves.
        e.run_until(119);
        assert_eq!(e.ends("logs"), None);
        assert!(e.instance_runs() && e.node_exists());
        // It is gone at 120: the DaemonSet pod is next, then the critical.
        e.run_until(121);
        assert!(e.pod("app").is_none());
        assert_eq!(e.ends("logs"), Some(151));
        assert_eq!(e.ends("dns"), None);
        e.run_until(151);
        assert!(e.pod("logs").is_none());
        assert_eq!(e.ends("dns"), None);
        e.pass();
        let dns = e.ends("dns").expect("the critical pod is evicted last");
        assert_eq!(
            dns,
            151 + 10,
            "evicted as soon as the DaemonSet pod is gone"
        );
        assert!(e.instance_runs(), "not while a pod stops");
        e.run_until(dns + 1);
        assert!(e.pods().is_empty());
        assert!(!e.instance_runs(), "terminated once the node is drained");
        assert!(!e.node_exists());
        assert!(
            e.cluster
                .get_opt::<NodeClaim>(&ObjectKey::cluster("c1"))
                .is_none()
        );
    }

    /// pkg/utils/pod IsStuckTerminating; node/termination: "should not
    /// wait for pods that are stuck terminating" (a kubelet that never
    /// confirms).
    #[test]
    fn a_pod_nobody_confirms_holds_the_node_until_a_minute_past_its_grace_period() {
        let mut e = env(None);
        let never = Kubelet::NeverConfirms;
        e.cluster.create(on_n1("app", 30).build()).unwrap();
        e.delete_claim();
        let wait = e.pass_with(never);
        assert_eq!(e.ends("app"), Some(30));
        assert!(wait <= DRAIN_POLL);
        e.advance(Duration::from_secs(1));
        // Nothing left to evict: the next look is when it is stuck.
        assert_eq!(e.pass_with(never), Duration::from_secs(90));
        e.run_until_with(90, never);
        assert!(e.instance_runs(), "held until 30 s + 1 min");
        e.run_until_with(91, never);
        assert!(!e.instance_runs());
        assert!(e.pod("app").is_some(), "lost with its node");
    }

    /// terminator/suite_test.go: "should preemptively delete pods to
    /// satisfy their terminationGracePeriodSeconds"; node/termination:
    /// "should only delete pods when their terminationGracePeriodSeconds
    /// is less than the the node's remaining terminationGracePeriod".
    #[test]
    fn under_a_grace_period_pods_are_deleted_in_time_for_their_own_grace_period() {
        let mut e = env(Some("300s"));
        let protected =
            |name, grace| on_n1(name, grace).annotation("karpenter.sh/do-not-disrupt", "true");
        e.cluster.create(protected("keeper", 120).build()).unwrap();
        e.cluster.create(protected("quick", 10).build()).unwrap();
        e.delete_claim();
        e.pass();
        assert_eq!(e.ends("keeper"), None, "do-not-disrupt: not evicted");
        e.run_until(179);
        assert_eq!(e.ends("keeper"), None);
        e.run_until(180);
        // Deleted with the 120 s left: gone by the deadline.
        assert_eq!(e.ends("keeper"), Some(300));
        assert_eq!(
            e.pod("keeper")
                .unwrap()
                .metadata
                .deletion_grace_period_seconds,
            Some(120)
        );
        assert_eq!(e.ends("quick"), None);
        e.run_until(290);
        assert_eq!(e.ends("quick"), Some(300));
        assert!(e.instance_runs());
        e.run_until(301);
        assert!(e.pods().is_empty());
        assert!(!e.instance_runs());
    }

    /// terminator/suite_test.go: "should delete pods with a
    /// terminationGracePeriodSeconds longer than the node's remaining
    /// grace period" (IsPodEligibleForForcedEviction): an evicted pod whose
    /// own grace period outlasts the deadline is deleted again with the
    /// time left.
    #[test]
    fn a_terminating_pod_that_would_outlast_the_deadline_is_deleted_again_with_the_time_left() {
        let mut e = env(Some("100s"));
        e.cluster.create(on_n1("slow", 600).build()).unwrap();
        e.delete_claim();
        e.pass();
        // Evicted at 0 with its 600 s; its delete time (100 - 600) has
        // passed, so it is shortened to the 100 s left.
        assert_eq!(e.ends("slow"), Some(100));
        assert_eq!(
            e.pod("slow")
                .unwrap()
                .metadata
                .deletion_grace_period_seconds,
            Some(100)
        );
        e.run_until(99);
        assert!(e.instance_runs());
        e.run_until(101);
        assert!(e.pod("slow").is_none());
        assert!(!e.instance_runs());
    }

    /// node/health (node repair) sets the termination timestamp to now:
    /// every pod is deleted at once with a grace period of 1 s.
    #[test]
    fn a_deadline_now_deletes_every_pod_with_one_second() {
        let mut e = env(None);
        e.cluster.create(on_n1("app", 300).build()).unwrap();
        e.cluster
            .create(on_n1("logs", 300).owned_by("DaemonSet", "ds").build())
            .unwrap();
        e.cluster
            .update_with::<NodeClaim>(&ObjectKey::cluster("c1"), |c| {
                c.metadata.annotations.get_or_insert_default().insert(
                    super::super::repair::ANNOTATION_TERMINATION_TIMESTAMP.into(),
                    "1970-01-01T00:00:00Z".into(),
                );
            })
            .unwrap();
        e.delete_claim();
        e.pass();
        for name in ["app", "logs"] {
            assert_eq!(e.ends(name), Some(1), "{name}");
        }
        assert!(
            events_named(&mut e, "Evicted").is_empty(),
            "deleted, not evicted"
        );
        e.run_until(2);
        assert!(e.pods().is_empty());
        // Drained since 0 s: the minimum drain time ends at 5 s.
        e.run_until(5);
        assert!(!e.instance_runs());
    }

    /// The drain of issue 42: six pods behind a budget that allows one
    /// disruption, each evicted pod's replacement ready elsewhere 3 s after
    /// its eviction, and each pod's default grace period of 30 s. Each
    /// refused pod is retried on its own from 100 ms, doubling to 10 s
    /// (eviction.go's queue), so the sixth eviction comes about 33 s in and
    /// the node is drained at about a minute, within a spot interruption's
    /// two-minute notice. (A node-wide retry after 5, 10, 20, 40, 60 and
    /// 60 s evicted the sixth only at 135 s, and drained at 165 s.)
    #[test]
    fn six_pods_behind_a_budget_of_one_drain_within_the_spot_notice() {
        use k8s_openapi::api::policy::v1::PodDisruptionBudget;
        let mut e = env(None);
        e.cluster
            .create::<PodDisruptionBudget>(from_yaml(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: six, namespace: default}\nspec: {minAvailable: 5, selector: {matchLabels: {app: six}}}\n",
            ))
            .unwrap();
        for i in 0..6 {
            e.cluster
                .create(on_n1(&format!("six-{i}"), 30).label("app", "six").build())
                .unwrap();
        }
        e.delete_claim();
        // Evicted pods (by name) and when their replacement is ready.
        let mut replaced: BTreeMap<String, i64> = BTreeMap::new();
        let mut evicted_at: Vec<(String, f64)> = Vec::new();
        let start = e.clock.now();
        let secs = |e: &Env| {
            Duration::try_from(e.clock.now().duration_since(start))
                .unwrap()
                .as_secs_f64()
        };
        while e.instance_runs() && secs(&e) < 300.0 {
            let wait = e.pass();
            let now_ms = (secs(&e) * 1000.0).round() as i64;
            for p in e.pods() {
                let name = p.metadata.name.clone().unwrap();
                if p.metadata.deletion_timestamp.is_some() && !replaced.contains_key(&name) {
                    replaced.insert(name.clone(), now_ms + 3000);
                    evicted_at.push((name, secs(&e)));
                }
            }
            // The replacements, ready on another node.
            for (name, ready) in &replaced {
                let replacement = format!("{name}-r");
                if *ready <= now_ms && e.pod(&replacement).is_none() {
                    let r = pod("default", &replacement).label("app", "six").on("n2");
                    e.cluster.create(r.grace(30).running().build()).unwrap();
                }
            }
            // Step to the controller's next look, at most 100 ms (the
            // kubelet and the replacements act between passes).
            let step = wait.clamp(Duration::from_millis(1), Duration::from_millis(100));
            e.clock.advance(step).unwrap();
        }
        let drained = secs(&e);
        assert_eq!(evicted_at.len(), 6, "{evicted_at:?}");
        let sixth = evicted_at[5].1;
        assert!(
            sixth < 40.0,
            "the sixth pod was evicted at {sixth:.1} s: {evicted_at:?}"
        );
        assert!(
            drained < 120.0,
            "drained at {drained:.1} s, past the two-minute notice: {evicted_at:?}"
        );
        // The first eviction is at once, and a refused pod's retries do not
        // wait for the node: each eviction follows the replacement before
        // it by at most the pod's current retry wait.
        assert_eq!(evicted_at[0].1, 0.0);
        assert!(evicted_at[1].1 < 3.5, "{evicted_at:?}");
    }

    /// A VolumeAttachment of `pv` (or of an inline volume without one)
    /// on `node`.
    fn attachment(name: &str, node: &str, pv: Option<&str>) -> VolumeAttachment {
        let source = pv.map_or(
            "{inlineVolumeSpec: {csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}}}".to_string(),
            |pv| format!("{{persistentVolumeName: {pv}}}"),
        );
        from_yaml(&format!(
            "apiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata: {{name: {name}}}\nspec: {{attacher: ebs.csi.aws.com, nodeName: {node}, source: {source}}}\n"
        ))
    }

    /// A claim `name` bound to PersistentVolume `pv`.
    fn claim_of(name: &str, pv: &str) -> PersistentVolumeClaim {
        from_yaml(&format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: default}}\nspec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}, volumeName: {pv}}}\n"
        ))
    }

    /// `pod` mounting the claim `claim`.
    fn mounting(mut pod: Pod, claim: &str) -> Pod {
        use k8s_openapi::api::core::v1::{PersistentVolumeClaimVolumeSource, Volume};
        pod.spec.as_mut().unwrap().volumes = Some(vec![Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: None,
            }),
            ..Default::default()
        }]);
        pod
    }

    /// The NodeClaim's volume wait.
    trait Volumes {
        fn hold_claim(&self);
        fn claim(&self) -> Arc<NodeClaim>;
        fn volumes_detached(&self) -> Option<(String, String, i64)>;
        fn delete_attachment(&self, name: &str);
        fn awaiting(&mut self) -> Vec<(String, String)>;
    }

    impl Volumes for Env {
        /// A second finalizer keeps the NodeClaim after termination
        /// releases it, so its last conditions can be read.
        fn hold_claim(&self) {
            self.cluster
                .update_with::<NodeClaim>(&ObjectKey::cluster("c1"), |c| {
                    c.metadata
                        .finalizers
                        .get_or_insert_default()
                        .push("test.dovetail.dev/hold".into());
                })
                .unwrap();
        }

        fn claim(&self) -> Arc<NodeClaim> {
            self.get(&ObjectKey::cluster("c1"))
        }

        /// `VolumesDetached`: (status, reason, lastTransitionTime in
        /// seconds).
        fn volumes_detached(&self) -> Option<(String, String, i64)> {
            let claim = self.claim();
            let c = claim.condition(super::super::volumes::CONDITION_VOLUMES_DETACHED)?;
            Some((
                format!("{:?}", c.status),
                c.reason.clone().unwrap_or_default(),
                c.last_transition_time.0.as_second(),
            ))
        }

        fn delete_attachment(&self, name: &str) {
            self.cluster
                .delete::<VolumeAttachment>(&ObjectKey::cluster(name))
                .unwrap();
        }

        /// The `AwaitingVolumeDetachment` events since the last call, as
        /// (object, message).
        fn awaiting(&mut self) -> Vec<(String, String)> {
            self.controller
                .drain_events()
                .into_iter()
                .filter(|ev| ev.reason == "AwaitingVolumeDetachment")
                .map(|ev| (ev.object, ev.message))
                .collect()
        }
    }

    /// node/termination suite_test.go, VolumeAttachments: "should wait for
    /// volume attachments". The wait starts once the drain is done, counts
    /// only the node's attachments of a PersistentVolume, and ends when
    /// they are deleted.
    #[test]
    fn the_node_is_held_until_its_volume_attachments_are_gone() {
        let mut e = env(None);
        e.hold_claim();
        e.cluster.create(claim_of("data", "pv-app")).unwrap();
        e.cluster
            .create(mounting(on_n1("app", 10).build(), "data"))
            .unwrap();
        e.cluster
            .create(attachment("csi-app", "n1", Some("pv-app")))
            .unwrap();
        e.cluster
            .create(attachment("csi-other-node", "n2", Some("pv-x")))
            .unwrap();
        e.cluster
            .create(attachment("csi-inline", "n1", None))
            .unwrap();
        e.delete_claim();
        e.pass();
        assert_eq!(e.ends("app"), Some(10), "the drain comes first");
        assert_eq!(e.volumes_detached(), None, "not while draining");
        assert!(e.awaiting().is_empty());
        e.run_until(11);
        assert!(e.pod("app").is_none());
        assert_eq!(
            e.volumes_detached(),
            Some(("Unknown".into(), "AwaitingVolumeDetachment".into(), 11))
        );
        assert_eq!(
            e.awaiting(),
            vec![(
                "Node/n1".to_string(),
                "Awaiting deletion of bound volumeattachments (csi-app)".to_string()
            )]
        );
        assert!(e.instance_runs() && e.node_exists());
        // Held, with one Event and no status write per pass.
        let version = e.claim().metadata.resource_version.clone();
        e.run_until(100);
        assert!(e.instance_runs() && e.node_exists());
        assert!(e.awaiting().is_empty(), "one Event while nothing changes");
        assert_eq!(e.claim().metadata.resource_version, version);
        assert_eq!(
            e.volumes_detached(),
            Some(("Unknown".into(), "AwaitingVolumeDetachment".into(), 11))
        );
        // The attach-detach controller deletes it: termination goes on.
        e.delete_attachment("csi-app");
        e.pass();
        assert!(!e.instance_runs());
        assert!(!e.node_exists());
        assert_eq!(
            e.volumes_detached(),
            Some(("True".into(), "VolumesDetached".into(), 100))
        );
        let claim = e.claim();
        assert!(
            !has_finalizer(&claim.metadata),
            "released: {:?}",
            claim.metadata.finalizers
        );
    }

    /// suite_test.go: "should only wait for volume attachments associated
    /// with drainable pods": a pod that tolerates the disrupted taint stays
    /// on the node, and so does its volume.
    #[test]
    fn the_volume_of_a_pod_that_is_not_drained_does_not_hold_the_node() {
        let mut e = env(None);
        e.hold_claim();
        let tolerating = {
            let mut p = mounting(on_n1("stays", 30).build(), "kept");
            p.spec.as_mut().unwrap().tolerations =
                Some(vec![k8s_openapi::api::core::v1::Toleration {
                    key: Some("karpenter.sh/disrupted".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }]);
            p
        };
        e.cluster.create(tolerating).unwrap();
        e.cluster.create(claim_of("kept", "pv-kept")).unwrap();
        e.cluster
            .create(attachment("csi-kept", "n1", Some("pv-kept")))
            .unwrap();
        e.cluster
            .create(attachment("csi-moved", "n1", Some("pv-moved")))
            .unwrap();
        e.delete_claim();
        // Past the minimum drain time of the empty node.
        e.run_until(5);
        assert_eq!(e.ends("stays"), None, "not drained");
        assert_eq!(
            e.awaiting(),
            vec![(
                "Node/n1".to_string(),
                "Awaiting deletion of bound volumeattachments (csi-moved)".to_string()
            )]
        );
        assert!(e.instance_runs());
        e.delete_attachment("csi-moved");
        e.pass();
        assert!(!e.instance_runs(), "csi-kept does not hold it");
        assert_eq!(e.volumes_detached().map(|c| c.0), Some("True".to_string()));
    }

    /// suite_test.go: "should wait for volume attachments until the
    /// nodeclaim's termination grace period expires".
    #[test]
    fn the_termination_grace_period_ends_the_wait_for_volumes() {
        let mut e = env(Some("60s"));
        e.hold_claim();
        e.cluster
            .create(attachment("csi-stuck", "n1", Some("pv-stuck")))
            .unwrap();
        e.delete_claim();
        // The volumes are awaited once the node is drained (5 s, the
        // minimum drain time).
        e.run_until(5);
        assert_eq!(
            e.volumes_detached(),
            Some(("Unknown".into(), "AwaitingVolumeDetachment".into(), 5))
        );
        // Until the deadline, held; just past it, terminated.
        e.run_until(60);
        assert!(e.instance_runs());
        e.run_until(61);
        assert!(!e.instance_runs());
        assert!(!e.node_exists());
        assert_eq!(
            e.volumes_detached(),
            Some(("False".into(), "TerminationGracePeriodElapsed".into(), 61))
        );
    }

    /// Many pending attachments: the Event names five, and a new Event
    /// when what is pending changes.
    #[test]
    fn the_event_names_five_attachments_and_follows_what_is_pending() {
        let mut e = env(None);
        for i in 0..7 {
            e.cluster
                .create(attachment(
                    &format!("csi-{i}"),
                    "n1",
                    Some(&format!("pv-{i}")),
                ))
                .unwrap();
        }
        e.delete_claim();
        // Past the minimum drain time of the empty node.
        e.run_until(5);
        assert_eq!(
            e.awaiting(),
            vec![(
                "Node/n1".to_string(),
                "Awaiting deletion of bound volumeattachments (csi-0, csi-1, csi-2, csi-3, csi-4 and 2 other(s))".to_string()
            )]
        );
        for i in 0..6 {
            e.delete_attachment(&format!("csi-{i}"));
        }
        e.pass();
        assert_eq!(
            e.awaiting(),
            vec![(
                "Node/n1".to_string(),
                "Awaiting deletion of bound volumeattachments (csi-6)".to_string()
            )]
        );
        e.delete_attachment("csi-6");
        e.pass();
        assert!(!e.instance_runs());
    }

    /// The objects of the events named `reason` since the last call.
    fn events_named(e: &mut Env, reason: &str) -> Vec<String> {
        e.controller
            .drain_events()
            .into_iter()
            .filter(|ev| ev.reason == reason)
            .map(|ev| ev.object)
            .collect()
    }
}
