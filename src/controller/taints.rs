//! The taints and label the controller writes on a Node it disrupts or
//! terminates: `karpenter.sh/disrupted:NoSchedule` and, while it drains,
//! the label that takes it out of external load balancers. Each write is
//! one replace of the Node, skipped when the Node already has it; a failed
//! write is made again by the next pass that finds the Node without it.

use k8s_openapi::api::core::v1::{Node, Taint as NodeTaint};

use crate::api::TAINT_DISRUPTED;
use crate::api::node::has_taint;
use crate::cluster::Cluster;

/// The label that takes a node out of external load balancers' targets
/// (the cloud provider's service controller and the AWS Load Balancer
/// Controller honour it), set while a node drains, as Karpenter's
/// terminator does, so connections drain before the instance goes.
pub const LABEL_EXCLUDE_BALANCERS: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Taints a node `karpenter.sh/disrupted:NoSchedule`, if it is not yet.
pub(crate) async fn taint_disrupted<C: Cluster>(cluster: &C, node: &Node) {
    taint(cluster, node, false).await;
}

/// Taints a node that is terminating, and takes it out of external load
/// balancers, in one write.
pub(crate) async fn taint_terminating<C: Cluster>(cluster: &C, node: &Node) {
    taint(cluster, node, true).await;
}

async fn taint(cluster: &impl Cluster, node: &Node, exclude_balancers: bool) {
    let labelled = !exclude_balancers
        || node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_EXCLUDE_BALANCERS));
    if has_taint(node, TAINT_DISRUPTED) && labelled {
        return;
    }
    let mut n = node.clone();
    if !labelled {
        n.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(LABEL_EXCLUDE_BALANCERS.into(), "karpenter".into());
    }
    if has_taint(node, TAINT_DISRUPTED) {
        let _ = cluster.replace(n).await;
        return;
    }
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
    let _ = cluster.replace(n).await;
}

/// Takes `karpenter.sh/disrupted` off a node whose disruption was given up.
pub(crate) async fn untaint_disrupted<C: Cluster>(cluster: &C, node: &Node) {
    if !has_taint(node, TAINT_DISRUPTED) {
        return;
    }
    let mut n = node.clone();
    if let Some(ts) = n.spec.as_mut().and_then(|s| s.taints.as_mut()) {
        ts.retain(|t| t.key != TAINT_DISRUPTED);
    }
    let _ = cluster.replace(n).await;
}
