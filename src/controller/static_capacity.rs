//! Static NodePools (`spec.replicas`) under the reference's
//! `StaticCapacity` feature gate: each keeps exactly `replicas` NodeClaims.
//! The counts and the choice of what to launch or remove are
//! [`crate::disruption::statics`] (pure); this loop reads the cluster and
//! writes the result:
//! - **provisioning**: a pool short of `replicas` gets NodeClaims of its
//!   template (no instance-type list: the cloud provider launches the
//!   cheapest type its requirements allow), within `limits.nodes`; a
//!   NodeClaim that expires, is interrupted or deleted by hand is replaced
//!   this way;
//! - **deprovisioning**: a pool above `replicas` deletes its surplus
//!   NodeClaims at once (termination drains them, honouring
//!   PodDisruptionBudgets), as the reference does: no budget governs a
//!   scale-down;
//! - **status**: `status.nodes` and `status.resources`, written for every
//!   pool by `controller::pool_status`.
//!
//! Pending pods never get new capacity from a static pool (the provisioner
//! leaves those pools out), but schedule onto their nodes like any other.
//! Drift replaces their nodes one for one (the disruption loop's static
//! drift); they are never consolidated.
//!
//! With the gate off, a static pool launches nothing, as in the reference,
//! but is never silently ignored: its `Ready` condition turns False with
//! reason [`STATIC_DISABLED`] and an Event says why (while the provisioner
//! reads the NodePools), and `validate` warns.
//!
//! It runs at the start of each provisioning reconcile.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::ANNOTATION_DISRUPTION_REASON;
use super::Controller;
use super::claims::lifetime_remaining;
use super::pool_status::{STATIC_DISABLED, STATIC_DISABLED_MESSAGE};
use super::status::event_object;
use crate::api::{EC2NodeClass, NodeClaim, NodePool, SlimPod};
use crate::cloud::CloudProvider;
use crate::cluster::{Cluster, ObjectKey};
use crate::disruption::pods::{eviction_cost, is_movable};
use crate::disruption::statics::{StaticNode, StaticPool, removal_order, template_claim};

/// How soon a pool at its `limits.nodes` looks again (the reference's).
const LIMIT_RETRY: Duration = Duration::from_secs(30);

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// A static NodePool while the `StaticCapacity` gate is off: `Ready`
    /// turns False with the reason, and an Event says so once, when the
    /// condition changes (the reference launches nothing for it either,
    /// but says nothing).
    pub(super) async fn static_inactive(&mut self, pool: &NodePool) {
        if self
            .set_pool_ready(pool, false, STATIC_DISABLED, STATIC_DISABLED_MESSAGE)
            .await
        {
            self.event(
                event_object(pool),
                STATIC_DISABLED,
                STATIC_DISABLED_MESSAGE.into(),
            );
        }
    }

    /// The static NodePools with their NodeClaims counted; empty while the
    /// gate is off.
    pub(super) fn static_pools(&self) -> BTreeMap<String, StaticPool> {
        let mut out = BTreeMap::new();
        if !self.settings.static_capacity {
            return out;
        }
        for pool in self.cluster.list::<NodePool>() {
            let (Some(name), Some(replicas)) = (pool.metadata.name.clone(), pool.spec.replicas)
            else {
                continue;
            };
            if pool.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let node_limit = pool
                .spec
                .limits
                .as_ref()
                .and_then(|l| l.get("nodes"))
                .and_then(|q| crate::model::quantity::parse_quantity("nodes", &q.0).ok());
            out.insert(
                name,
                StaticPool {
                    replicas,
                    node_limit,
                    ..StaticPool::default()
                },
            );
        }
        if out.is_empty() {
            return out;
        }
        for claim in self.cluster.list::<NodeClaim>() {
            let Some(state) = claim.nodepool_name().and_then(|p| out.get_mut(p)) else {
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                state.deleting += 1;
            } else if is_marked(&claim) {
                state.pending_disruption += 1;
            } else {
                state.running += 1;
            }
        }
        out
    }

    /// Launches and removes NodeClaims of static NodePools, and writes
    /// their status. Returns when it next needs to run.
    pub(super) async fn reconcile_static(&mut self) -> Duration {
        let mut next = self.settings.resync;
        if !self.settings.static_capacity {
            for pool in self.cluster.list::<NodePool>() {
                if pool.spec.replicas.is_some() && pool.metadata.deletion_timestamp.is_none() {
                    self.static_inactive(&pool).await;
                }
            }
            return next;
        }
        let statics = self.static_pools();
        for (name, state) in &statics {
            let Some(pool) = self
                .cluster
                .get::<NodePool>(&ObjectKey::cluster(name.as_str()))
            else {
                continue;
            };
            // A pool dovetail found unusable (its node class missing, its
            // instance types unreadable) launches nothing, as the
            // reference waits for the NodePool's root condition.
            let ready = pool
                .condition(super::conditions::READY)
                .is_none_or(|c| c.is_true());
            let n = if ready { state.to_launch() } else { 0 };
            if n > 0 {
                self.static_limited.remove(name);
                self.launch_static(&pool, state, n).await;
            } else if !state.short() || !ready {
                self.static_limited.remove(name);
            } else {
                // Short, and at `limits.nodes`: said once until it changes.
                next = next.min(LIMIT_RETRY);
                if self.static_limited.insert(name.clone()) {
                    self.event(
                        format!("NodePool/{name}"),
                        "NodeLimitReached",
                        format!(
                            "{} of {} replicas running; limits.nodes leaves no room for more",
                            state.running, state.replicas
                        ),
                    );
                }
            }
            let surplus = state.to_remove();
            if surplus > 0 {
                self.remove_static(name, state, usize::try_from(surplus).unwrap_or(0))
                    .await;
            }
        }
        next
    }

    async fn launch_static(&mut self, pool: &NodePool, state: &StaticPool, n: i64) {
        let pool_name = pool.metadata.name.clone().unwrap_or_default();
        let spec = match crate::convert::nodepool_spec_with_types(pool, Vec::new()) {
            Ok(s) => s,
            Err(e) => {
                self.event(format!("NodePool/{pool_name}"), "InvalidNodePool", e);
                return;
            }
        };
        let claim = template_claim(&spec);
        let class = self.cluster.get::<EC2NodeClass>(&ObjectKey::cluster(
            pool.spec.template.spec.node_class_ref.name.clone(),
        ));
        for i in 0..n {
            let name = self.next_claim_name(&pool_name);
            let object = self.nodeclaim_for(name.clone(), pool, class.as_deref(), &claim);
            match self.cluster.create(object).await {
                Ok(_) => {
                    self.metrics
                        .nodeclaims_created
                        .with_label_values(&["provisioned", pool_name.as_str(), "false"])
                        .inc();
                    self.event(
                        format!("NodeClaim/{name}"),
                        "Provisioned",
                        format!(
                            "for static NodePool {pool_name}: {} of {} replicas running, {} being launched",
                            state.running,
                            state.replicas,
                            n - i
                        ),
                    );
                }
                Err(e) => {
                    self.event(format!("NodeClaim/{name}"), "CreateFailed", e.to_string());
                    return;
                }
            }
        }
    }

    /// Deletes `count` surplus NodeClaims of a static pool, in the order of
    /// [`removal_order`].
    async fn remove_static(&mut self, pool: &str, state: &StaticPool, count: usize) {
        let now = self.clock.now();
        let claims: Vec<Arc<NodeClaim>> = self
            .cluster
            .list::<NodeClaim>()
            .into_iter()
            .filter(|c| c.nodepool_name() == Some(pool))
            .filter(|c| c.metadata.deletion_timestamp.is_none() && !is_marked(c))
            .collect();
        let pods = self.cluster.list::<SlimPod>();
        let mut by_node: HashMap<&str, Vec<&Arc<SlimPod>>> = HashMap::new();
        for p in &pods {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                && !p.is_finished()
                && p.metadata.deletion_timestamp.is_none()
            {
                by_node.entry(n).or_default().push(p);
            }
        }
        let nodes: Vec<StaticNode> = claims
            .iter()
            .map(|c| {
                let status = c.status.as_ref();
                let on: &[&Arc<SlimPod>] = status
                    .and_then(|s| s.node_name.as_deref())
                    .and_then(|n| by_node.get(n))
                    .map_or(&[], Vec::as_slice);
                let do_not_disrupt = on
                    .iter()
                    .any(|p| crate::disruption::pods::do_not_disrupt(p).active(now));
                let movable: Vec<&&Arc<SlimPod>> = on.iter().filter(|p| is_movable(p)).collect();
                StaticNode {
                    nodeclaim: c.metadata.name.clone().unwrap_or_default(),
                    resolved: status.and_then(|s| s.provider_id.as_ref()).is_some(),
                    empty: movable.is_empty() && !do_not_disrupt,
                    do_not_disrupt,
                    cost: movable.iter().map(|p| eviction_cost(p)).sum::<f64>()
                        * lifetime_remaining(c, now),
                }
            })
            .collect();
        for name in removal_order(nodes, count) {
            let Some(claim) = claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name.as_str()))
            else {
                continue;
            };
            self.delete_claim(
                claim,
                "Overprovisioned",
                format!(
                    "static NodePool {pool} runs {} NodeClaims for {} replicas: deleted",
                    state.running, state.replicas
                ),
            )
            .await;
        }
    }
}

/// Whether a NodeClaim is marked for a disruption (its replacement, if
/// any, is on its way).
fn is_marked(claim: &NodeClaim) -> bool {
    claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_DISRUPTION_REASON))
}

#[cfg(test)]
mod tests {
    //! pkg/controllers/static/{provisioning,deprovisioning}/suite_test.go
    //! of Karpenter v1.14.1, against the in-memory cluster and the
    //! simulated EC2, named after their It()s.

    use super::*;
    use crate::api::common::ConditionStatus;
    use crate::clock::Timestamp;
    use crate::controller::Settings;
    use crate::testing::{Env, World, example_class, from_yaml};

    fn static_pool(replicas: Option<i64>, limits: &str) -> NodePool {
        let replicas = replicas.map_or(String::new(), |r| format!("  replicas: {r}\n"));
        from_yaml(&format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: fixed}}\nspec:\n{replicas}{limits}  template:\n    metadata: {{labels: {{team: a}}}}\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n"
        ))
    }

    fn env(pool: NodePool, static_capacity: bool) -> Env {
        let w = World::new();
        w.cluster.create(example_class()).unwrap();
        w.cluster.create(pool).unwrap();
        w.env(Settings {
            static_capacity,
            ..Settings::default()
        })
    }

    /// The static pass, and the NodeClaims and NodePool it leaves.
    trait Static {
        fn pass(&mut self);
        fn claims(&self) -> Vec<Arc<NodeClaim>>;
        fn live(&self) -> usize;
        fn set_replicas(&self, replicas: i64);
        fn pool(&self) -> Arc<NodePool>;
    }

    impl Static for Env {
        fn pass(&mut self) {
            self.rt.block_on(self.controller.reconcile_static());
        }

        fn claims(&self) -> Vec<Arc<NodeClaim>> {
            Cluster::list::<NodeClaim>(self.cluster.as_ref()).to_vec()
        }

        fn live(&self) -> usize {
            self.claims()
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .count()
        }

        fn set_replicas(&self, replicas: i64) {
            let mut pool = (*self.pool()).clone();
            pool.spec.replicas = Some(replicas);
            self.cluster.replace(pool).unwrap();
        }

        fn pool(&self) -> Arc<NodePool> {
            self.get(&ObjectKey::cluster("fixed"))
        }
    }

    #[test]
    fn should_create_nodeclaims_when_current_node_count_is_less_than_desired_replicas() {
        let mut e = env(static_pool(Some(3), ""), true);
        e.pass();
        assert_eq!(e.live(), 3);
        // A second pass counts them: no more.
        e.pass();
        assert_eq!(e.live(), 3);
    }

    #[test]
    fn should_respect_nodepool_template_specifications() {
        let mut e = env(static_pool(Some(1), ""), true);
        e.pass();
        let claim = e.claims().pop().unwrap();
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("karpenter.sh/nodepool").map(String::as_str),
            Some("fixed")
        );
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        let keys: Vec<&str> = claim
            .spec
            .requirements
            .iter()
            .map(|r| r.key.as_str())
            .collect();
        assert!(keys.contains(&"karpenter.sh/capacity-type"), "{keys:?}");
        // No instance-type list: the cloud provider takes the cheapest.
        assert!(
            !keys.contains(&"node.kubernetes.io/instance-type"),
            "{keys:?}"
        );
        assert!(
            claim
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("dovetail.dev/nodepool-hash"))
        );
    }

    #[test]
    fn should_return_early_if_nodepool_root_condition_is_not_true() {
        let mut pool = static_pool(Some(1), "");
        pool.metadata.name = Some("fixed".into());
        let mut e = env(pool, true);
        let mut unready = (*e.pool()).clone();
        let conds = unready
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new);
        crate::controller::set_condition(
            conds,
            "Ready",
            false,
            "NodeClassNotFound",
            "",
            Timestamp::UNIX_EPOCH,
        );
        e.cluster.update_status(unready).unwrap();
        e.pass();
        assert_eq!(e.live(), 0);
    }

    #[test]
    fn should_return_early_if_nodepool_replicas_is_nil() {
        let mut e = env(static_pool(None, ""), true);
        e.pass();
        assert_eq!(e.live(), 0);
    }

    #[test]
    fn should_handle_zero_replicas() {
        let mut e = env(static_pool(Some(0), ""), true);
        e.pass();
        assert_eq!(e.live(), 0);
    }

    #[test]
    fn should_create_additional_nodeclaims_to_reach_desired_replicas() {
        let mut e = env(static_pool(Some(2), ""), true);
        e.pass();
        e.set_replicas(5);
        e.pass();
        assert_eq!(e.live(), 5);
    }

    #[test]
    fn should_not_create_additional_nodeclaims_when_node_limits_are_reached() {
        let mut e = env(static_pool(Some(5), "  limits: {nodes: \"2\"}\n"), true);
        e.pass();
        assert_eq!(e.live(), 2);
        e.pass();
        e.pass();
        assert_eq!(e.live(), 2);
        let events = e.controller.drain_events();
        let limited = events.iter().filter(|ev| ev.reason == "NodeLimitReached");
        assert_eq!(limited.count(), 1, "reported once: {events:?}");
    }

    #[test]
    fn should_terminate_excess_nodeclaims_when_current_count_exceeds_desired_replicas() {
        let mut e = env(static_pool(Some(4), ""), true);
        e.pass();
        e.set_replicas(1);
        e.pass();
        assert_eq!(e.live(), 1);
        // Deleted claims are not counted again: nothing more goes.
        e.pass();
        assert_eq!(e.live(), 1);
    }

    #[test]
    fn should_handle_zero_replicas_by_terminating_all_nodeclaims() {
        let mut e = env(static_pool(Some(2), ""), true);
        e.pass();
        e.set_replicas(0);
        e.pass();
        assert_eq!(e.live(), 0);
    }

    #[test]
    fn status_nodes_reports_the_launched_nodeclaims() {
        let mut e = env(static_pool(Some(2), ""), true);
        e.pass();
        // Not launched yet: no capacity to count.
        e.rt.block_on(e.controller.reconcile_pool_status());
        assert_eq!(e.pool().status.as_ref().and_then(|s| s.nodes), Some(0));
        e.rt.block_on(e.controller.reconcile_nodeclaims());
        assert_eq!(e.pool().status.as_ref().and_then(|s| s.nodes), Some(2));
    }

    #[test]
    fn a_static_nodepool_is_reported_inactive_while_the_gate_is_off() {
        let mut e = env(static_pool(Some(3), ""), false);
        e.pass();
        e.pass();
        assert_eq!(e.live(), 0, "nothing is launched without the gate");
        let pool = e.pool();
        let ready = pool.condition("Ready").expect("a Ready condition");
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason.as_deref(), Some(STATIC_DISABLED));
        let events = e.controller.drain_events();
        let inactive: Vec<_> = events
            .iter()
            .filter(|ev| ev.reason == STATIC_DISABLED && ev.object == "NodePool/fixed")
            .collect();
        assert_eq!(inactive.len(), 1, "one Event, not one per pass: {events:?}");
    }
}
