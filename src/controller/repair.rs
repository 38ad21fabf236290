//! Node repair under the reference's `NodeRepair` feature gate: the rules
//! are [`crate::disruption::repair`] (pure); this loop reads the nodes'
//! conditions, and for a node unhealthy past its toleration, in a NodePool
//! (or a cluster, for NodeClaims of no pool) where at most 20% of the nodes
//! are unhealthy, stamps its NodeClaim's termination timestamp with now
//! ([`ANNOTATION_TERMINATION_TIMESTAMP`], which termination reads as the
//! end of the grace period: pods are deleted, not evicted, and the node
//! does not wait for them) and deletes it. Budgets and `do-not-disrupt`
//! do not apply. Its pods count as pending at once, so their capacity is
//! launched as for any deleting node (a static pool replaces the NodeClaim
//! itself).
//!
//! A repair held back by too many unhealthy nodes is looked at again every
//! [`BLOCKED_RECHECK`], and is a `NodeRepairBlocked` Warning on the node at
//! most every [`BLOCKED_EVENT_EVERY`].
//!
//! It runs in each NodeClaim reconcile (`Controller::reconcile_nodeclaims`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use super::Controller;
use crate::api::{LABEL_NODEPOOL, NodeClaim};
use crate::clock::{Timestamp, format_rfc3339};
use crate::cloud::CloudProvider;
use crate::cluster::Cluster;
use crate::disruption::repair::{
    ALLOWED_UNHEALTHY_PERCENT, AWS_POLICIES, NodeCondition, matches_any, may_repair, unhealthy,
};

/// Karpenter's `karpenter.sh/nodeclaim-termination-timestamp`: when a
/// deleting NodeClaim's node goes whatever its pods ask.
pub const ANNOTATION_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
/// How soon a repair held back by too many unhealthy nodes is looked at
/// again (the reference's requeue).
const BLOCKED_RECHECK: Duration = Duration::from_secs(5 * 60);
/// How often a node's `NodeRepairBlocked` is said again (the reference's
/// Event dedupe timeout).
const BLOCKED_EVENT_EVERY: Duration = Duration::from_secs(15 * 60);

fn conditions_of(node: &Node) -> Vec<NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| NodeCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            last_transition: c
                .last_transition_time
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
        })
        .collect()
}

fn since(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(t.duration_since(now)).unwrap_or_default()
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// Repairs nodes unhealthy past their toleration. Returns when the
    /// next toleration ends.
    pub(super) async fn reconcile_repair(&mut self) -> Duration {
        let mut next = self.settings.resync;
        if !self.settings.node_repair {
            return next;
        }
        let now = self.clock.now();
        let nodes = self.cluster.list::<Node>();
        // Unhealthy and total nodes per NodePool ("" for nodes of none).
        let mut health: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        let mut cluster = (0usize, 0usize);
        let mut due: Vec<(&Arc<Node>, String, String)> = Vec::new();
        for node in &nodes {
            let conditions = conditions_of(node);
            let sick = matches_any(&conditions, &AWS_POLICIES);
            let pool = crate::api::label_or_empty(&node.metadata, LABEL_NODEPOOL).to_string();
            let entry = health.entry(pool).or_default();
            entry.1 += 1;
            cluster.1 += 1;
            if sick {
                entry.0 += 1;
                cluster.0 += 1;
            }
            if node.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Some(u) = unhealthy(&conditions, &AWS_POLICIES) {
                if u.due > now {
                    next = next.min(since(u.due, now));
                } else {
                    due.push((node, u.condition_type, u.status));
                }
            }
        }
        if due.is_empty() {
            return next;
        }
        let claims = self.cluster.list::<NodeClaim>();
        let by_node: HashMap<&str, &Arc<NodeClaim>> = claims
            .iter()
            .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c)))
            .collect();
        for (node, condition, status) in due {
            let name = node.metadata.name.clone().unwrap_or_default();
            // Only nodes of dovetail's NodeClaims.
            let Some(claim) = by_node.get(name.as_str()).copied() else {
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let (pool, (sick, total)) = match claim.nodepool_name() {
                Some(p) => (
                    format!("NodePool {p}"),
                    health.get(p).copied().unwrap_or_default(),
                ),
                None => ("the cluster".to_string(), cluster),
            };
            if !may_repair(sick, total) {
                next = next.min(BLOCKED_RECHECK);
                let last = self.repair_blocked.get(&name).copied();
                if last.is_none_or(|t| since(now, t) >= BLOCKED_EVENT_EVERY) {
                    self.repair_blocked.insert(name.clone(), now);
                    self.event(
                        format!("Node/{name}"),
                        "NodeRepairBlocked",
                        format!(
                            "{condition}={status}: more than {ALLOWED_UNHEALTHY_PERCENT}% of the nodes of {pool} are unhealthy ({sick} of {total})"
                        ),
                    );
                }
                continue;
            }
            self.repair_blocked.remove(&name);
            self.repair(claim, &name, &condition, &status, now).await;
        }
        next
    }

    /// Stamps the NodeClaim's termination timestamp with now and deletes it.
    async fn repair(
        &mut self,
        claim: &NodeClaim,
        node: &str,
        condition: &str,
        status: &str,
        now: Timestamp,
    ) {
        let stamped = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_TERMINATION_TIMESTAMP))
            .and_then(|v| crate::clock::parse_rfc3339(v).ok())
            .is_some_and(|t| t <= now);
        if !stamped {
            let mut updated = claim.clone();
            updated
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ANNOTATION_TERMINATION_TIMESTAMP.into(), format_rfc3339(now));
            if let Err(e) = self.cluster.replace(updated).await {
                self.event(
                    format!("NodeClaim/{}", claim.metadata.name.as_deref().unwrap_or("")),
                    "RepairFailed",
                    e.to_string(),
                );
                return;
            }
        }
        self.metrics.disrupted(claim, "Unhealthy");
        let label = |k: &str| crate::api::label_or_empty(&claim.metadata, k).to_string();
        let image = claim
            .status
            .as_ref()
            .and_then(|s| s.image_id.clone())
            .unwrap_or_default();
        self.metrics
            .nodeclaims_unhealthy_disrupted
            .with_label_values(&[
                super::metrics::snake_case(condition).as_str(),
                label(LABEL_NODEPOOL).as_str(),
                label(crate::api::LABEL_CAPACITY_TYPE).as_str(),
                image.as_str(),
            ])
            .inc();
        self.delete_claim(
            claim,
            "Unhealthy",
            format!(
                "node {node} has {condition}={status} past its toleration: replaced without draining"
            ),
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    //! pkg/controllers/node/health/suite_test.go of Karpenter v1.14.1,
    //! against the in-memory cluster, named after its It()s.

    use super::*;
    use crate::cluster::ObjectKey;
    use crate::controller::Settings;
    use crate::testing::{Env, World, from_yaml};

    /// `n` nodes of NodePool `general`, each with its NodeClaim; the
    /// first `unhealthy` report `Ready=Unknown` from the start.
    fn env(n: usize, unhealthy: usize, node_repair: bool) -> Env {
        env_in(Some("general"), n, unhealthy, node_repair)
    }

    /// As [`env`], the nodes and NodeClaims in `pool` (none: no label).
    fn env_in(pool: Option<&str>, n: usize, unhealthy: usize, node_repair: bool) -> Env {
        let labels = match pool {
            Some(p) => format!("karpenter.sh/nodepool: {p}, karpenter.sh/capacity-type: on-demand"),
            None => "karpenter.sh/capacity-type: on-demand".to_string(),
        };
        let w = World::new();
        let cluster = &w.cluster;
        for i in 0..n {
            let status = if i < unhealthy { "Unknown" } else { "True" };
            let node: Node = from_yaml(&format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}, labels: {{{labels}}}, annotations: {{karpenter.sh/do-not-disrupt: \"true\"}}}}\nstatus:\n  conditions:\n    - {{type: Ready, status: \"{status}\", lastTransitionTime: \"1970-01-01T00:00:00Z\"}}\n"
            ));
            cluster.create(node).unwrap();
            let claim: NodeClaim = from_yaml(&format!(
                "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: claim-{i}, labels: {{{labels}}}, finalizers: [karpenter.sh/termination]}}\nspec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  requirements: []\n"
            ));
            let claim = cluster.create(claim).unwrap();
            let mut with_status = (*claim).clone();
            with_status.status = Some(crate::api::nodeclaim::NodeClaimStatus {
                node_name: Some(format!("node-{i}")),
                ..Default::default()
            });
            cluster.update_status(with_status).unwrap();
        }
        w.env(Settings {
            node_repair,
            ..Settings::default()
        })
    }

    /// The repair pass, and what it did to the NodeClaims.
    trait Repair {
        fn pass(&mut self) -> Duration;
        fn claim(&self, i: usize) -> Arc<NodeClaim>;
        fn deleting(&self, i: usize) -> bool;
    }

    impl Repair for Env {
        fn pass(&mut self) -> Duration {
            self.rt.block_on(self.controller.reconcile_repair())
        }

        fn claim(&self, i: usize) -> Arc<NodeClaim> {
            self.get(&ObjectKey::cluster(format!("claim-{i}")))
        }

        fn deleting(&self, i: usize) -> bool {
            self.claim(i).metadata.deletion_timestamp.is_some()
        }
    }

    #[test]
    fn should_not_delete_node_when_health_duration_is_not_reached() {
        let mut e = env(5, 1, true);
        e.clock.advance(Duration::from_secs(29 * 60)).unwrap();
        // The next look is when the toleration ends.
        assert_eq!(e.pass(), Duration::from_secs(60));
        assert!(!e.deleting(0));
    }

    #[test]
    fn should_delete_nodes_that_are_unhealthy_by_the_cloud_provider() {
        let mut e = env(5, 1, true);
        e.clock.advance(Duration::from_secs(30 * 60)).unwrap();
        e.pass();
        assert!(e.deleting(0));
        assert!(!e.deleting(1));
    }

    #[test]
    fn should_set_annotation_termination_grace_period_when_force_termination_is_started() {
        let mut e = env(5, 1, true);
        e.clock.advance(Duration::from_secs(30 * 60)).unwrap();
        e.pass();
        let stamp = e
            .claim(0)
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .get(ANNOTATION_TERMINATION_TIMESTAMP)
            .cloned();
        assert_eq!(stamp.as_deref(), Some("1970-01-01T00:30:00Z"));
    }

    #[test]
    fn should_ignore_do_not_disrupt_on_a_node() {
        // Every node of `env` carries karpenter.sh/do-not-disrupt: "true".
        let mut e = env(1, 1, true);
        e.clock.advance(Duration::from_secs(31 * 60)).unwrap();
        e.pass();
        assert!(e.deleting(0));
    }

    #[test]
    fn should_ignore_unhealthy_nodes_if_more_then_20_percent_of_the_nodes_are_unhealthy_in_a_nodepool()
     {
        let mut e = env(5, 2, true);
        e.clock.advance(Duration::from_secs(40 * 60)).unwrap();
        assert!(e.pass() <= BLOCKED_RECHECK);
        assert!(!e.deleting(0) && !e.deleting(1));
        let events = e.controller.drain_events();
        assert_eq!(
            events
                .iter()
                .filter(|ev| ev.reason == "NodeRepairBlocked")
                .count(),
            2,
            "{events:?}"
        );
        // Said again only after the dedupe timeout.
        e.clock.advance(BLOCKED_RECHECK).unwrap();
        e.pass();
        assert!(e.controller.drain_events().is_empty());
    }

    #[test]
    fn should_ignore_unhealthy_nodes_if_more_then_20_percent_of_the_nodes_are_unhealthy_in_a_cluster()
     {
        // NodeClaims of no NodePool: the cluster's nodes count.
        let mut e = env_in(None, 5, 2, true);
        e.clock.advance(Duration::from_secs(40 * 60)).unwrap();
        e.pass();
        assert!(!e.deleting(0) && !e.deleting(1));
        let mut e = env_in(None, 5, 1, true);
        e.clock.advance(Duration::from_secs(40 * 60)).unwrap();
        e.pass();
        assert!(e.deleting(0));
    }

    #[test]
    fn should_not_update_termination_grace_period_if_set_before_the_current_time() {
        let mut e = env(5, 1, true);
        let mut claim = (*e.claim(0)).clone();
        claim
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(
                ANNOTATION_TERMINATION_TIMESTAMP.into(),
                "1970-01-01T00:10:00Z".into(),
            );
        e.cluster.replace(claim).unwrap();
        e.clock.advance(Duration::from_secs(30 * 60)).unwrap();
        e.pass();
        assert!(e.deleting(0));
        let stamp = e.claim(0).metadata.annotations.clone().unwrap_or_default()
            [ANNOTATION_TERMINATION_TIMESTAMP]
            .clone();
        assert_eq!(stamp, "1970-01-01T00:10:00Z");
    }

    #[test]
    fn should_consider_round_up_when_there_is_a_low_number_of_nodes_for_a_nodepool() {
        // One of three is 33%, within 20% rounded up.
        let mut e = env(3, 1, true);
        e.clock.advance(Duration::from_secs(30 * 60)).unwrap();
        e.pass();
        assert!(e.deleting(0));
    }

    #[test]
    fn should_fire_a_karpenter_nodeclaims_disrupted_total_metric_when_unhealthy() {
        let mut e = env(5, 1, true);
        e.clock.advance(Duration::from_secs(30 * 60)).unwrap();
        e.pass();
        let n = e
            .controller
            .metrics
            .nodeclaims_disrupted
            .with_label_values(&["unhealthy", "general", "on-demand"])
            .get();
        assert_eq!(n, 1);
        let n = e
            .controller
            .metrics
            .nodeclaims_unhealthy_disrupted
            .with_label_values(&["ready", "general", "on-demand", ""])
            .get();
        assert_eq!(n, 1);
    }

    #[test]
    fn nothing_is_repaired_while_the_node_repair_gate_is_off() {
        let mut e = env(5, 1, false);
        e.clock.advance(Duration::from_secs(60 * 60)).unwrap();
        e.pass();
        assert!(!e.deleting(0));
    }
}
