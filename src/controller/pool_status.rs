//! What a NodePool's status reports, as Karpenter's NodePool counter,
//! readiness and registration-health controllers write it:
//!
//! - `status.nodes` and `status.resources`: the count and capacity of its
//!   NodeClaims not being deleted or disrupted (a node's own capacity once
//!   registered, else the claim's; `state_metrics::nodepool_usage`, which
//!   `karpenter_nodepools_usage` reports too), for static and dynamic
//!   pools alike;
//! - `NodeClassReady`: whether the NodePool's EC2NodeClass exists and is
//!   Ready;
//! - `NodeRegistrationHealthy`: `Unknown` until a NodeClaim of the pool
//!   registers (`True`), `False` with the launch's or the registration's
//!   reason when a NodeClaim was given up on;
//! - `Ready`: `True` for a pool the provisioner can use, `False` with the
//!   reason otherwise (the provisioner reports it through `pool_usable`
//!   and `pool_unusable` while it reads the NodePools), so `kubectl wait` and Argo CD's health
//!   see a healthy pool.
//!
//! One status write per NodePool whose status changed. The status reads
//! only NodeClaims, Nodes, NodePools and EC2NodeClasses (and the
//! registration failures reported to it), so a pass skips it while their
//! revisions are those of its last pass that wrote everything it meant
//! to.

use k8s_openapi::api::core::v1::Node;

use super::status::event_object;
use super::{Conditioned, Controller, conditions, set_condition, set_condition_status};
use crate::api::common::ConditionStatus;
use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::cloud::CloudProvider;
use crate::cluster::{Cluster, ObjectKey};

pub const NODE_CLASS_READY: &str = "NodeClassReady";
pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
/// The `Ready` reason of a static NodePool while the gate is off.
pub const STATIC_DISABLED: &str = "StaticCapacityDisabled";
/// Its message, as `validate` words it.
pub const STATIC_DISABLED_MESSAGE: &str = crate::config::validate::STATIC_INACTIVE;

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// A NodePool the provisioner cannot use is never dropped silently: its
    /// `Ready` condition turns False with the reason, and an Event says why.
    pub(super) async fn pool_unusable(&mut self, pool: &NodePool, reason: &str, message: String) {
        self.set_pool_ready(pool, false, reason, &message).await;
        self.event(event_object(pool), reason, message);
    }

    /// Clears a `Ready=False` this provisioner set, once the pool is usable.
    pub(super) async fn pool_usable(&mut self, pool: &NodePool) {
        let ours = [
            "NodeClassNotFound",
            "NodeClassNotReady",
            "InstanceTypesUnavailable",
            "InvalidNodePool",
            STATIC_DISABLED,
        ];
        let ready = pool.condition(super::conditions::READY);
        if ready.is_none()
            || ready.is_some_and(|c| {
                !c.is_true() && c.reason.as_deref().is_some_and(|r| ours.contains(&r))
            })
        {
            self.set_pool_ready(pool, true, "Ready", "").await;
        }
    }

    /// Whether the condition changed.
    pub(super) async fn set_pool_ready(
        &mut self,
        pool: &NodePool,
        ready: bool,
        reason: &str,
        message: &str,
    ) -> bool {
        let now = self.clock.now();
        let mut updated = pool.clone();
        let conds = updated.conditions_mut();
        if !super::set_condition(conds, super::conditions::READY, ready, reason, message, now) {
            return false;
        }
        let _ = self.record_status(updated).await;
        true
    }

    /// A NodeClaim of `pool` was given up on before its node registered:
    /// the pool's `NodeRegistrationHealthy` turns False with the reason.
    pub(super) fn registration_failed(&mut self, pool: &str, reason: &str, message: &str) {
        self.registration_failures
            .insert(pool.to_string(), (reason.to_string(), message.to_string()));
    }

    /// Writes every NodePool's status that changed (see the module
    /// documentation).
    pub(super) async fn reconcile_pool_status(&mut self) {
        let read = [
            self.cluster.revision::<NodeClaim>(),
            self.cluster.revision::<Node>(),
            self.cluster.revision::<NodePool>(),
            self.cluster.revision::<EC2NodeClass>(),
        ];
        if self.registration_failures.is_empty() && self.pool_status_read == Some(read) {
            return;
        }
        let mut written = true;
        let now = self.clock.now();
        let claims = self.cluster.list::<NodeClaim>();
        let nodes = self.node_index();
        let mut usage = super::state_metrics::nodepool_usage(
            &claims,
            |n| nodes.named(n),
            &mut self.pool_capacity,
        );
        let last_registered = self.pool_capacity.last_registered();
        let failures = std::mem::take(&mut self.registration_failures);
        for pool in self.cluster.list::<NodePool>() {
            let name = pool.metadata.name.clone().unwrap_or_default();
            let mut updated = (*pool).clone();
            let status = updated.status.get_or_insert_with(Default::default);
            let mut changed = false;

            let used = usage.remove(&name).unwrap_or_default();
            let nodes = used.get("nodes");
            let resources = used.to_quantities();
            if status.nodes != Some(nodes) || status.resources.as_ref() != Some(&resources) {
                status.nodes = Some(nodes);
                status.resources = Some(resources);
                changed = true;
            }

            let conds = status.conditions.get_or_insert_with(Vec::new);
            let class_name = &pool.spec.template.spec.node_class_ref.name;
            let class = self
                .cluster
                .get::<EC2NodeClass>(&ObjectKey::cluster(class_name));
            changed |= match class {
                None => set_condition(
                    conds,
                    NODE_CLASS_READY,
                    false,
                    "NodeClassNotFound",
                    &format!("EC2NodeClass {class_name:?} not found"),
                    now,
                ),
                Some(c) => {
                    let ready = crate::api::common::find_condition(
                        c.status.as_ref().and_then(|s| s.conditions.as_deref()),
                        conditions::READY,
                    );
                    match ready.map(|r| r.status) {
                        Some(ConditionStatus::True) => {
                            set_condition(conds, NODE_CLASS_READY, true, "NodeClassReady", "", now)
                        }
                        Some(ConditionStatus::False) => set_condition(
                            conds,
                            NODE_CLASS_READY,
                            false,
                            "NodeClassNotReady",
                            &format!("EC2NodeClass {class_name:?} is not ready"),
                            now,
                        ),
                        _ => set_condition_status(
                            conds,
                            NODE_CLASS_READY,
                            ConditionStatus::Unknown,
                            "AwaitingReconciliation",
                            &format!("EC2NodeClass {class_name:?} has not reported readiness"),
                            now,
                        ),
                    }
                }
            };

            // The latest registration; a False condition turns True only
            // when a claim registers after it was set.
            let last_registered = last_registered.get(&name).copied();
            let current = conds.iter().find(|c| c.type_ == NODE_REGISTRATION_HEALTHY);
            let known = current.is_some();
            let registered = last_registered.is_some_and(|t| {
                current.is_none_or(|c| {
                    c.status != ConditionStatus::False || t > c.last_transition_time.0
                })
            });
            changed |= if let Some((reason, message)) = failures.get(&name) {
                set_condition(
                    conds,
                    NODE_REGISTRATION_HEALTHY,
                    false,
                    reason,
                    message,
                    now,
                )
            } else if registered {
                set_condition(
                    conds,
                    NODE_REGISTRATION_HEALTHY,
                    true,
                    "NodeRegistrationHealthy",
                    "",
                    now,
                )
            } else if !known {
                set_condition_status(
                    conds,
                    NODE_REGISTRATION_HEALTHY,
                    ConditionStatus::Unknown,
                    "AwaitingReconciliation",
                    "no NodeClaim of this NodePool has registered yet",
                    now,
                )
            } else {
                false
            };
            if changed && self.record_status(updated).await.is_err() {
                written = false;
                if let Some(f) = failures.get(&name) {
                    self.registration_failures.insert(name.clone(), f.clone());
                }
            }
        }
        self.pool_status_read = written.then_some(read);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::controller::Settings;
    use crate::testing::World;
    use crate::world::MemoryCluster;
    use crate::world::ec2::SimEc2;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    /// A cluster with the NodePool `general`, and a controller over it on
    /// a manual clock.
    fn general() -> (
        Arc<ManualClock>,
        Arc<MemoryCluster>,
        Controller<MemoryCluster, SimEc2>,
    ) {
        let w = World::new();
        w.cluster.create(NodePool::test("general")).expect("pool");
        let controller = w.controller(Settings::default());
        (w.clock, w.cluster, controller)
    }

    /// The pass is skipped only after one that wrote everything: a refused
    /// write is tried again at the next pass although nothing it reads
    /// changed, and then nothing more is written.
    #[tokio::test]
    async fn a_refused_status_write_is_retried_though_nothing_read_changed() {
        use crate::cluster::ApiError;
        use crate::world::{Fault, Write};
        let (_, cluster, mut controller) = general();
        let status_writes = || {
            cluster
                .accesses()
                .iter()
                .filter(|(a, _)| a.resource == "nodepools/status")
                .map(|(_, n)| *n)
                .sum::<u64>()
        };
        cluster.inject(Fault::new(
            Write::ReplaceStatus,
            "NodePool",
            ApiError::Internal {
                message: "injected".into(),
            },
        ));
        controller.reconcile_pool_status().await;
        let pool = || Cluster::get::<NodePool>(cluster.as_ref(), &ObjectKey::cluster("general"));
        assert!(
            pool().expect("pool").status.is_none(),
            "the write was refused"
        );
        controller.reconcile_pool_status().await;
        assert_eq!(
            pool().expect("pool").status.as_ref().and_then(|s| s.nodes),
            Some(0)
        );
        let written = status_writes();
        controller.reconcile_pool_status().await;
        controller.reconcile_pool_status().await;
        assert_eq!(
            status_writes(),
            written,
            "nothing read changed, nothing written"
        );
    }

    #[tokio::test]
    async fn a_pool_reports_its_nodes_resources_and_readiness() {
        let (clock, cluster, mut controller) = general();
        controller.reconcile_pool_status().await;
        let pool = Cluster::get::<NodePool>(cluster.as_ref(), &ObjectKey::cluster("general"))
            .expect("pool");
        let status = pool.status.as_ref().expect("status");
        assert_eq!(status.nodes, Some(0));
        let class = pool.condition(NODE_CLASS_READY).expect("NodeClassReady");
        assert_eq!(class.reason.as_deref(), Some("NodeClassNotFound"));
        let health = pool
            .condition(NODE_REGISTRATION_HEALTHY)
            .expect("NodeRegistrationHealthy");
        assert_eq!(health.status, ConditionStatus::Unknown);

        // A registered claim of 4 CPUs: counted, and registration is healthy.
        let mut claim = NodeClaim::test("general-a");
        claim
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(crate::api::LABEL_NODEPOOL.into(), "general".into());
        let s = claim.status.get_or_insert_with(Default::default);
        s.capacity = Some(BTreeMap::from([("cpu".to_string(), Quantity("4".into()))]));
        set_condition(
            s.conditions.get_or_insert_with(Vec::new),
            conditions::REGISTERED,
            true,
            "Registered",
            "",
            clock.now(),
        );
        cluster.create(claim).expect("claim");
        controller.reconcile_pool_status().await;
        let pool = Cluster::get::<NodePool>(cluster.as_ref(), &ObjectKey::cluster("general"))
            .expect("pool");
        let status = pool.status.as_ref().expect("status");
        assert_eq!(status.nodes, Some(1));
        assert_eq!(
            status
                .resources
                .as_ref()
                .and_then(|r| r.get("cpu"))
                .map(|q| q.0.as_str()),
            Some("4")
        );
        assert!(
            pool.condition(NODE_REGISTRATION_HEALTHY)
                .expect("health")
                .is_true()
        );

        // A claim given up on: False with its reason.
        controller.registration_failed("general", "LaunchTimeout", "not launched within 300s");
        controller.reconcile_pool_status().await;
        let pool = Cluster::get::<NodePool>(cluster.as_ref(), &ObjectKey::cluster("general"))
            .expect("pool");
        let health = pool.condition(NODE_REGISTRATION_HEALTHY).expect("health");
        assert_eq!(health.status, ConditionStatus::False);
        assert_eq!(health.reason.as_deref(), Some("LaunchTimeout"));
    }

    /// The node class's conditions, as the refresh writes them, and the
    /// NodePool's `NodeClassReady` that reads their root.
    #[tokio::test]
    async fn a_node_class_gets_every_condition_and_the_pool_follows_its_ready() {
        let (_, cluster, mut controller) = general();
        let mut class = EC2NodeClass::test("default");
        class.spec.tags = Some(BTreeMap::from([(
            "karpenter.sh/nodepool".to_string(),
            "x".to_string(),
        )]));
        cluster.create(class).expect("class");
        controller.refresh_nodeclasses().await;
        controller.reconcile_pool_status().await;
        let class = Cluster::get::<EC2NodeClass>(cluster.as_ref(), &ObjectKey::cluster("default"))
            .expect("class");
        let conds = class
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .expect("conditions");
        let get = |t: &str| {
            conds
                .iter()
                .find(|c| c.type_ == t)
                .unwrap_or_else(|| panic!("{t}: {conds:?}"))
        };
        for t in [
            "AMIsReady",
            "SubnetsReady",
            "SecurityGroupsReady",
            "InstanceProfileReady",
            "PlacementGroupReady",
        ] {
            assert_eq!(get(t).status, ConditionStatus::True, "{t}");
            assert_eq!(get(t).reason.as_deref(), Some(t));
        }
        let validation = get("ValidationSucceeded");
        assert_eq!(validation.status, ConditionStatus::False);
        assert_eq!(validation.reason.as_deref(), Some("TagValidationFailed"));
        let ready = get("Ready");
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason.as_deref(), Some("UnhealthyDependents"));
        assert_eq!(ready.message.as_deref(), Some("ValidationSucceeded=False"));
        let pool = Cluster::get::<NodePool>(cluster.as_ref(), &ObjectKey::cluster("general"))
            .expect("pool");
        let class_ready = pool.condition(NODE_CLASS_READY).expect("NodeClassReady");
        assert_eq!(class_ready.status, ConditionStatus::False);
        assert_eq!(class_ready.reason.as_deref(), Some("NodeClassNotReady"));

        // The tag fixed: every condition True, and so the pool's.
        let mut fixed = (*class).clone();
        fixed.spec.tags = None;
        cluster.replace(fixed).expect("fixed");
        controller.refresh_nodeclasses().await;
        controller.reconcile_pool_status().await;
        let class = Cluster::get::<EC2NodeClass>(cluster.as_ref(), &ObjectKey::cluster("default"))
            .expect("class");
        let conds = class
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .expect("conditions");
        assert!(
            conds.iter().all(|c| c.status == ConditionStatus::True),
            "{conds:?}"
        );
        let pool = Cluster::get::<NodePool>(cluster.as_ref(), &ObjectKey::cluster("general"))
            .expect("pool");
        let class_ready = pool.condition(NODE_CLASS_READY).expect("NodeClassReady");
        assert_eq!(class_ready.status, ConditionStatus::True);
    }
}
