//! Static NodePools (`spec.replicas`, the reference's `StaticCapacity`
//! feature gate): how many NodeClaims a pool launches or removes, which it
//! removes first, and the NodeClaim a drifted static node is replaced by.
//! Pure: the controller counts the pool's NodeClaims and carries out the
//! answer.
//!
//! The counts follow the reference's NodePool state:
//! - *running*: NodeClaims neither being deleted nor marked for a
//!   disruption (launching ones included);
//! - *pending disruption*: marked for a disruption whose replacement is
//!   not initialized yet; its replacement is running, so the pool holds one
//!   NodeClaim more than `replicas` meanwhile;
//! - *deleting*: being deleted, until they are gone.
//!
//! A pool launches `replicas - running` NodeClaims when running plus
//! pending disruption is below `replicas`, within `limits.nodes` (counted
//! over all three); it removes `running - replicas` when above, whatever its
//! budgets, as the reference does: unlaunched NodeClaims first, then empty
//! nodes, then the cheapest to disrupt (nodes with a `do-not-disrupt` pod
//! last). It is never consolidated. A drifted node is replaced one for one
//! within the `Drifted` budget and `limits.nodes`, once a scale-down is
//! complete.

use crate::model::labels::{CAPACITY_TYPE, ZONE, is_well_known};
use crate::model::requirements::allow_none;
use crate::model::{InstanceType, Requirements, Resources};
use crate::scheduling::{NewNodeClaim, NodePoolSpec};

/// A static NodePool and its NodeClaims, counted as above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StaticPool {
    pub replicas: i64,
    /// `limits.nodes`; `None` when unset.
    pub node_limit: Option<i64>,
    pub running: usize,
    pub pending_disruption: usize,
    pub deleting: usize,
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl StaticPool {
    /// How many of `wanted` new NodeClaims `limits.nodes` leaves room for
    /// (the reference's `ReserveNodeCount`).
    pub fn reserve(&self, wanted: i64) -> i64 {
        let Some(limit) = self.node_limit else {
            return wanted.max(0);
        };
        let used = count(self.running) + count(self.pending_disruption) + count(self.deleting);
        wanted.min(limit.saturating_sub(used)).max(0)
    }

    /// Whether the pool is short of `replicas`, counting the NodeClaims
    /// being replaced after a drift (their replacements are running).
    pub fn short(&self) -> bool {
        count(self.running) + count(self.pending_disruption) < self.replicas
    }

    /// NodeClaims to launch now.
    pub fn to_launch(&self) -> i64 {
        if !self.short() {
            return 0;
        }
        self.reserve(self.replicas - count(self.running))
    }

    /// NodeClaims to remove now: only running ones count, so a drift's
    /// replacement in flight is never taken for a surplus.
    pub fn to_remove(&self) -> i64 {
        (count(self.running) - self.replicas).max(0)
    }

    /// Whether drift may replace nodes: not while a scale-down is still
    /// under way.
    pub fn may_drift(&self) -> bool {
        count(self.running) + count(self.pending_disruption) <= self.replicas
    }
}

/// A running NodeClaim of a static pool, as its removal order reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticNode {
    pub nodeclaim: String,
    /// Launched: it has a provider id.
    pub resolved: bool,
    /// No pod but DaemonSet (and mirror) pods, and none with an active
    /// `do-not-disrupt`.
    pub empty: bool,
    /// A pod on it has an active `do-not-disrupt`.
    pub do_not_disrupt: bool,
    /// Its pods' eviction cost times its remaining lifetime.
    pub cost: f64,
}

/// The `count` NodeClaims a scale-down removes: those not launched yet
/// (by name), then empty nodes, then the rest with nodes holding a
/// `do-not-disrupt` pod last and the cheapest to disrupt first.
pub fn removal_order(mut nodes: Vec<StaticNode>, count: usize) -> Vec<String> {
    nodes.sort_by(|a, b| {
        let rank = |n: &StaticNode| match (n.resolved, n.empty) {
            (false, _) => 0,
            (true, true) => 1,
            (true, false) => 2,
        };
        rank(a)
            .cmp(&rank(b))
            .then_with(|| a.do_not_disrupt.cmp(&b.do_not_disrupt))
            .then_with(|| {
                if rank(a) == 2 {
                    a.cost.total_cmp(&b.cost)
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .then_with(|| a.nodeclaim.cmp(&b.nodeclaim))
    });
    nodes.into_iter().take(count).map(|n| n.nodeclaim).collect()
}

/// The NodeClaim a static pool launches: its template's requirements, no
/// instance-type list (the cloud provider takes the cheapest type the
/// requirements allow), no pods. `price`, `zones` and `capacity_types`
/// describe the cheapest offering it may launch.
pub fn template_claim(spec: &NodePoolSpec) -> NewNodeClaim {
    let constraints = Requirements(
        spec.requirements
            .0
            .iter()
            .filter(|(k, _)| is_well_known(k))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect(),
    );
    let allowed = |key: &str, v: &str| constraints.get(key).is_none_or(|r| r.has(v));
    let mut zones = std::collections::BTreeSet::new();
    let mut capacity_types = std::collections::BTreeSet::new();
    let mut price = f64::INFINITY;
    for it in spec
        .instance_types
        .iter()
        .filter(|t: &&InstanceType| t.requirements.compatible(&constraints, allow_none).is_ok())
    {
        for o in it.offerings.iter().filter(|o| {
            o.available && allowed(ZONE, &o.zone) && allowed(CAPACITY_TYPE, &o.capacity_type)
        }) {
            zones.insert(o.zone.clone());
            capacity_types.insert(o.capacity_type.clone());
            price = price.min(o.price);
        }
    }
    NewNodeClaim {
        nodepool: spec.name.clone(),
        requirements: spec.requirements.clone(),
        instance_types: Vec::new(),
        zones: zones.into_iter().collect(),
        capacity_types: capacity_types.into_iter().collect(),
        pods: Vec::new(),
        requests: Resources::new(),
        price: if price.is_finite() { price } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(replicas: i64, limit: Option<i64>, running: usize) -> StaticPool {
        StaticPool {
            replicas,
            node_limit: limit,
            running,
            ..StaticPool::default()
        }
    }

    fn node(name: &str, resolved: bool, empty: bool, dnd: bool, cost: f64) -> StaticNode {
        StaticNode {
            nodeclaim: name.into(),
            resolved,
            empty,
            do_not_disrupt: dnd,
            cost,
        }
    }

    // pkg/controllers/static/provisioning/suite_test.go

    #[test]
    fn should_return_early_if_current_node_count_exceeds_desired_replicas() {
        assert_eq!(pool(2, None, 3).to_launch(), 0);
        assert_eq!(pool(3, None, 3).to_launch(), 0);
    }

    #[test]
    fn should_create_nodeclaims_when_current_node_count_is_less_than_desired_replicas() {
        assert_eq!(pool(3, None, 0).to_launch(), 3);
    }

    #[test]
    fn should_create_additional_nodeclaims_to_reach_desired_replicas() {
        assert_eq!(pool(5, None, 3).to_launch(), 2);
    }

    #[test]
    fn should_not_create_additional_nodeclaims() {
        // Two running and one being replaced after a drift: the
        // replacement is among the running, so the pool is complete.
        let p = StaticPool {
            pending_disruption: 1,
            ..pool(3, None, 2)
        };
        assert_eq!(p.to_launch(), 0);
    }

    #[test]
    fn should_not_create_additional_nodeclaims_when_node_limits_are_reached() {
        assert_eq!(pool(5, Some(3), 3).to_launch(), 0);
        // Deleting NodeClaims count against the limit until they are gone.
        let p = StaticPool {
            deleting: 1,
            ..pool(5, Some(4), 2)
        };
        assert_eq!(p.to_launch(), 1);
    }

    #[test]
    fn should_handle_zero_replicas() {
        assert_eq!(pool(0, None, 0).to_launch(), 0);
        assert_eq!(pool(0, None, 2).to_remove(), 2);
    }

    #[test]
    fn should_handle_large_replica_counts() {
        assert_eq!(pool(1000, None, 0).to_launch(), 1000);
        assert_eq!(pool(1000, Some(10), 0).to_launch(), 10);
    }

    // pkg/controllers/static/deprovisioning/suite_test.go

    #[test]
    fn should_return_early_if_current_node_count_is_less_than_or_equal_to_desired_replicas() {
        assert_eq!(pool(3, None, 3).to_remove(), 0);
        assert_eq!(pool(3, None, 1).to_remove(), 0);
    }

    #[test]
    fn should_only_consider_running_nodeclaims_and_not_deleting_nodeclaims() {
        let p = StaticPool {
            deleting: 3,
            ..pool(2, None, 3)
        };
        assert_eq!(p.to_remove(), 1);
    }

    #[test]
    fn should_terminate_excess_nodeclaims_when_current_count_exceeds_desired_replicas() {
        assert_eq!(pool(2, None, 5).to_remove(), 3);
    }

    #[test]
    fn should_handle_no_active_nodeclaims_gracefully() {
        assert_eq!(pool(2, None, 0).to_remove(), 0);
        assert!(removal_order(Vec::new(), 2).is_empty());
    }

    #[test]
    fn should_prioritize_nodeclaims_that_have_unresolved_provider_id() {
        let order = removal_order(
            vec![
                node("a", true, true, false, 0.0),
                node("b", false, false, false, 0.0),
                node("c", true, false, false, 0.0),
            ],
            2,
        );
        assert_eq!(order, ["b", "a"]);
    }

    #[test]
    fn should_prioritize_empty_nodes_with_only_daemonset_pods_for_termination() {
        let order = removal_order(
            vec![
                node("busy", true, false, false, 0.5),
                node("daemons-only", true, true, false, 0.0),
            ],
            1,
        );
        assert_eq!(order, ["daemons-only"]);
    }

    #[test]
    fn should_terminate_non_empty_nodes_when_empty_nodes_are_insufficient() {
        let order = removal_order(
            vec![
                node("costly", true, false, false, 5.0),
                node("empty", true, true, false, 0.0),
                node("cheap", true, false, false, 1.0),
                node("protected", true, false, true, 0.0),
            ],
            3,
        );
        // disruption cost ordering: cheapest first, do-not-disrupt last.
        assert_eq!(order, ["empty", "cheap", "costly"]);
    }

    #[test]
    fn a_template_claim_lists_no_types_and_costs_its_cheapest_allowed_offering() {
        use crate::model::{Offering, Requirement};
        let mut spec = NodePoolSpec {
            name: "static".into(),
            weight: 0,
            requirements: Requirements::new(),
            labels: Default::default(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Resources::new(),
            instance_types: Vec::new(),
        };
        spec.requirements
            .add(CAPACITY_TYPE, Requirement::in_values(["on-demand"]));
        spec.requirements.add("team", Requirement::in_values(["a"]));
        let offering = |ct: &str, price: f64| Offering {
            zone: "z1".into(),
            capacity_type: ct.into(),
            price,
            available: true,
            reservations: Vec::new(),
        };
        let mut it = InstanceType {
            name: "m5.large".into(),
            requirements: Requirements::new(),
            capacity: Resources::new(),
            overhead: Default::default(),
            allocatable: Resources::new(),
            offerings: vec![offering("spot", 0.03), offering("on-demand", 0.096)],
        };
        it.complete_requirements();
        spec.instance_types.push(it);
        let claim = template_claim(&spec);
        assert!(claim.instance_types.is_empty() && claim.pods.is_empty());
        assert_eq!(claim.price, 0.096);
        assert_eq!(claim.capacity_types, ["on-demand"]);
        assert_eq!(claim.zones, ["z1"]);
        assert_eq!(claim.requirements, spec.requirements);
    }
}
