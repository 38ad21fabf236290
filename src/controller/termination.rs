//! Termination: a NodeClaim being deleted keeps the termination finalizer
//! until its node is drained (pods evicted through the eviction API, so
//! PodDisruptionBudgets hold), its instance is terminated and its node is
//! gone. A node deleted directly takes its NodeClaim with it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Taint as NodeTaint};

use super::Controller;
use crate::api::{FINALIZER_TERMINATION, NodeClaim, TAINT_DISRUPTED};
use crate::cloud::{CloudError, CloudProvider};
use crate::cluster::{Cluster, ObjectKey};

/// How soon to look again while pods are still draining.
const DRAIN_POLL: Duration = Duration::from_secs(5);

fn has_finalizer(meta: &kube::api::ObjectMeta) -> bool {
    meta.finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER_TERMINATION)
}

/// Pods a drain must evict: not finished, not already going, not owned by a
/// DaemonSet (its controller would recreate it) and not a static pod.
fn evictable(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) || pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let daemon = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    !mirror && !daemon
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
                None if has_finalizer(&node.metadata) => self.release_node(node).await,
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
        let pods = self.cluster.list::<Pod>();
        let mut pods_by_node: HashMap<&str, Vec<&Arc<Pod>>> = HashMap::new();
        for p in &pods {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                pods_by_node.entry(n).or_default().push(p);
            }
        }
        for claim in terminating {
            let node = claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| nodes_by_name.get(n).copied());
            if let Some(node) = node {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                let draining: Vec<&Arc<Pod>> = pods_by_node
                    .get(name)
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|p| evictable(p))
                    .collect();
                if !draining.is_empty() {
                    self.taint_disrupted(node).await;
                    self.evict_all(claim, &draining).await;
                    next = next.min(DRAIN_POLL);
                    continue;
                }
            }
            if !self.terminate_instance(claim).await {
                next = next.min(DRAIN_POLL);
                continue;
            }
            if let Some(node) = node {
                self.release_node(node).await;
                let key = ObjectKey::of(node.as_ref());
                let _ = self.cluster.delete::<Node>(&key).await;
            }
            self.remove_claim_finalizer(claim).await;
        }
        next
    }

    async fn taint_disrupted(&mut self, node: &Node) {
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT_DISRUPTED));
        if tainted {
            return;
        }
        let mut n = node.clone();
        n.spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(NodeTaint {
                key: TAINT_DISRUPTED.into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            });
        let _ = self.cluster.replace(n).await;
    }

    async fn evict_all(&mut self, claim: &NodeClaim, pods: &[&Arc<Pod>]) {
        let claim_name = format!(
            "NodeClaim/{}",
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        for pod in pods {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            match self.cluster.evict(ns, name).await {
                Ok(()) => self.event(
                    format!("Pod/{ns}/{name}"),
                    "Evicted",
                    format!("evicted to drain {claim_name}"),
                ),
                Err(e) if e.is_not_found() => {}
                Err(e) => self.event(
                    claim_name.clone(),
                    "EvictionBlocked",
                    format!("pod {ns}/{name}: {e}"),
                ),
            }
        }
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

    /// Removes the termination finalizer from a node.
    async fn release_node(&mut self, node: &Node) {
        if !has_finalizer(&node.metadata) {
            return;
        }
        let mut n = node.clone();
        if let Some(f) = n.metadata.finalizers.as_mut() {
            f.retain(|x| x != FINALIZER_TERMINATION);
        }
        let _ = self.cluster.replace(n).await;
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
            Ok(_) => self.event(name, "Terminated", "node and instance released".into()),
            Err(e) => self.event(name, "TerminationFailed", e.to_string()),
        }
    }
}
