//! Node repair (the reference's `NodeRepair` feature gate,
//! `pkg/controllers/node/health`): a node whose condition matches a repair
//! policy for longer than the policy's toleration is replaced without
//! draining: its NodeClaim gets a termination timestamp of now and is
//! deleted, so termination deletes its pods at once instead of evicting
//! them. Budgets and `do-not-disrupt` do not apply. Nothing is repaired in
//! a NodePool (or, for NodeClaims of no pool, the cluster) where more than
//! 20% of the nodes, rounded up, are unhealthy: a fault that wide is not
//! the node's. Pure: the controller reads the nodes' conditions.

use std::time::Duration;

use crate::clock::Timestamp;

/// A condition a cloud provider declares unhealthy after a toleration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition_type: &'static str,
    pub status: &'static str,
    pub toleration: Duration,
}

const fn policy(condition_type: &'static str, status: &'static str, minutes: u64) -> RepairPolicy {
    RepairPolicy {
        condition_type,
        status,
        toleration: Duration::from_secs(minutes * 60),
    }
}

/// The AWS provider's repair policies (Karpenter's AWS provider v1.14.1):
/// the kubelet's `Ready` False or Unknown for 30 minutes, the EKS node
/// monitoring agent's `AcceleratedHardwareReady` False for 10 minutes, and
/// its `StorageReady`, `NetworkingReady`, `KernelReady` and
/// `ContainerRuntimeReady` False for 30 minutes.
pub const AWS_POLICIES: [RepairPolicy; 7] = [
    policy("Ready", "False", 30),
    policy("Ready", "Unknown", 30),
    policy("AcceleratedHardwareReady", "False", 10),
    policy("StorageReady", "False", 30),
    policy("NetworkingReady", "False", 30),
    policy("KernelReady", "False", 30),
    policy("ContainerRuntimeReady", "False", 30),
];

/// The share of a NodePool's nodes that may be unhealthy for repair to go
/// on (rounded up).
pub const ALLOWED_UNHEALTHY_PERCENT: u64 = 20;

/// A node's condition as repair reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCondition {
    pub type_: String,
    pub status: String,
    pub last_transition: Timestamp,
}

/// A condition that makes a node unhealthy, and when its toleration ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unhealthy {
    pub condition_type: String,
    pub status: String,
    pub due: Timestamp,
}

/// Whether any policy matches the node's conditions (its toleration
/// aside): the node counts as unhealthy for its pool's threshold.
pub fn matches_any(conditions: &[NodeCondition], policies: &[RepairPolicy]) -> bool {
    policies.iter().any(|p| {
        conditions
            .iter()
            .any(|c| c.type_ == p.condition_type && c.status == p.status)
    })
}

/// The matching condition whose toleration ends first, as the reference
/// requeues on the closest one.
pub fn unhealthy(conditions: &[NodeCondition], policies: &[RepairPolicy]) -> Option<Unhealthy> {
    let mut best: Option<Unhealthy> = None;
    for p in policies {
        let Some(c) = conditions
            .iter()
            .find(|c| c.type_ == p.condition_type && c.status == p.status)
        else {
            continue;
        };
        let due = c
            .last_transition
            .checked_add(p.toleration)
            .unwrap_or(c.last_transition);
        if best.as_ref().is_none_or(|b| due < b.due) {
            best = Some(Unhealthy {
                condition_type: c.type_.clone(),
                status: c.status.clone(),
                due,
            });
        }
    }
    best
}

/// The most unhealthy nodes among `total` with which repair goes on:
/// 20%, rounded up (as a PodDisruptionBudget's percentages round).
pub fn threshold(total: usize) -> usize {
    let total = u64::try_from(total).unwrap_or(u64::MAX);
    usize::try_from((total * ALLOWED_UNHEALTHY_PERCENT).div_ceil(100)).unwrap_or(usize::MAX)
}

/// Whether repair may go on where `unhealthy` of `total` nodes are
/// unhealthy.
pub fn may_repair(unhealthy: usize, total: usize) -> bool {
    unhealthy <= threshold(total)
}

#[cfg(test)]
mod tests {
    //! pkg/controllers/node/health/suite_test.go of Karpenter v1.14.1,
    //! named after its It()s.

    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn cond(type_: &str, status: &str, at: i64) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition: t(at),
        }
    }

    #[test]
    fn should_delete_nodes_that_are_unhealthy_by_the_cloud_provider() {
        let u = unhealthy(&[cond("Ready", "Unknown", 0)], &AWS_POLICIES).unwrap();
        assert_eq!(u.due, t(30 * 60));
        assert_eq!(u.condition_type, "Ready");
    }

    #[test]
    fn should_not_delete_node_when_unhealthy_type_does_not_match_cloud_provider_passed_in_value() {
        assert!(unhealthy(&[cond("FakeCondition", "False", 0)], &AWS_POLICIES).is_none());
    }

    #[test]
    fn should_not_delete_node_when_health_status_does_not_match_cloud_provider_passed_in_value() {
        assert!(unhealthy(&[cond("Ready", "True", 0)], &AWS_POLICIES).is_none());
        assert!(unhealthy(&[cond("KernelReady", "Unknown", 0)], &AWS_POLICIES).is_none());
    }

    #[test]
    fn should_return_the_requeue_interval_for_the_condition_closest_to_its_termination_duration() {
        let u = unhealthy(
            &[
                cond("Ready", "False", 0),
                cond("AcceleratedHardwareReady", "False", 60),
            ],
            &AWS_POLICIES,
        )
        .unwrap();
        assert_eq!(u.condition_type, "AcceleratedHardwareReady");
        assert_eq!(u.due, t(60 + 10 * 60));
    }

    #[test]
    fn should_ignore_unhealthy_nodes_if_more_then_20_percent_of_the_nodes_are_unhealthy_in_a_nodepool()
     {
        assert!(!may_repair(3, 10));
        assert!(may_repair(2, 10));
        // The scenario's case: 2 of 5.
        assert!(!may_repair(2, 5));
        assert!(may_repair(1, 5));
    }

    #[test]
    fn should_consider_round_up_when_there_is_a_low_number_of_nodes_for_a_nodepool() {
        assert_eq!(threshold(3), 1);
        assert!(may_repair(1, 3));
        assert!(!may_repair(2, 3));
        assert_eq!(threshold(1), 1);
        assert_eq!(threshold(0), 0);
    }

    #[test]
    fn a_node_matching_any_policy_counts_as_unhealthy() {
        assert!(matches_any(
            &[cond("NetworkingReady", "False", 0)],
            &AWS_POLICIES
        ));
        assert!(!matches_any(&[cond("Ready", "True", 0)], &AWS_POLICIES));
    }
}
