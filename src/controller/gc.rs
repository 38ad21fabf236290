//! Garbage collection of instances no NodeClaim owns: the provider lists
//! the instances it launched for this cluster, and one that no NodeClaim's
//! `status.providerID` names, launched more than [`ORPHAN_GRACE`] ago, is
//! terminated. This catches a crash (or a failed status write) between a
//! launch and the NodeClaim recording it; the grace covers that window in
//! normal operation. Instances already shutting down are left alone.
//!
//! The other way round, a launched NodeClaim whose instance the provider no
//! longer lists (terminated outside dovetail, or reclaimed) is deleted with
//! the reason `InstanceGone`, so its pods are rescheduled and it stops
//! counting as capacity. The same listing relabels the nodes whose capacity
//! reservation ended ([`super::capacity_type`]).
//!
//! Everything goes through the `CloudProvider` trait. Only a registered
//! NodeClaim whose Node is not Ready is deleted as gone: an unregistered one
//! is the registration timeout's, and a Ready Node's kubelet runs whatever the
//! list says.

use std::collections::HashSet;
use std::time::Duration;

use super::{Controller, conditions, is_true};
use crate::api::NodeClaim;
use crate::cloud::{CloudError, CloudProvider, InstanceState};
use crate::cluster::Cluster;

/// How long after its launch an instance without a NodeClaim is left
/// alone: a launch is recorded on its NodeClaim well within this.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(5 * 60);
/// How often the collector runs when nothing is due sooner.
pub const GC_INTERVAL: Duration = Duration::from_secs(2 * 60);

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// Terminates orphaned instances (see the module documentation).
    /// Returns when it next needs to run.
    pub async fn reconcile_garbage(&mut self) -> Duration {
        let now = self.clock.now();
        let instances = match self.cloud.list().await {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "listing instances for garbage collection");
                return GC_INTERVAL;
            }
        };
        // Nodes whose reservation ended run on demand.
        self.sync_capacity_types(&instances).await;
        let claims = self.cluster.list::<NodeClaim>();
        let owned: HashSet<&str, foldhash::fast::RandomState> = claims
            .iter()
            .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
            .collect();
        let mut next = GC_INTERVAL;
        let mut orphans = Vec::new();
        for i in &instances {
            if owned.contains(i.provider_id.as_str())
                || matches!(
                    i.state,
                    InstanceState::ShuttingDown | InstanceState::Terminated
                )
            {
                continue;
            }
            let age = Duration::try_from(now.duration_since(i.launched_at)).unwrap_or_default();
            if age < ORPHAN_GRACE {
                next = next.min(ORPHAN_GRACE - age);
                continue;
            }
            orphans.push((i.provider_id.clone(), i.nodeclaim.clone(), age));
        }
        // NodeClaims whose instance is gone.
        let live: HashSet<&str, foldhash::fast::RandomState> = instances
            .iter()
            .filter(|i| !matches!(i.state, InstanceState::Terminated))
            .map(|i| i.provider_id.as_str())
            .collect();
        // As Karpenter: only registered claims (a launch a moment ago may
        // not be listed yet: DescribeInstances lags; an unregistered claim
        // is the registration timeout's), and never one whose Node is
        // Ready (its kubelet runs, whatever the list says: a tag edited
        // away from every instance must not delete every claim).
        let nodes = self.node_index();
        let ready = |p: &str| {
            nodes
                .providing(p)
                .iter()
                .any(|n| crate::api::node::is_ready(n))
        };
        let gone: Vec<std::sync::Arc<NodeClaim>> = claims
            .iter()
            .filter(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|p| !live.contains(p) && !ready(p))
            })
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| {
                is_true(
                    c.status.as_ref().and_then(|s| s.conditions.as_ref()),
                    conditions::REGISTERED,
                )
            })
            .cloned()
            .collect();
        for claim in gone {
            let pid = claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.clone())
                .unwrap_or_default();
            if self
                .delete_claim(
                    &claim,
                    "InstanceGone",
                    format!("instance {pid} no longer exists"),
                )
                .await
            {
                self.metrics.disrupted(&claim, "garbage_collected");
            }
        }
        for (provider_id, nodeclaim, age) in orphans {
            let object = format!("Instance/{provider_id}");
            match self.cloud.delete(&provider_id).await {
                Ok(()) => self.event(
                    object,
                    "GarbageCollected",
                    format!(
                        "terminated: no NodeClaim owns it {}s after launch (tagged for NodeClaim {:?})",
                        age.as_secs(),
                        nodeclaim
                    ),
                ),
                Err(CloudError::NotFound(_)) => {}
                Err(e) => self.event(object, "GarbageCollectionFailed", e.to_string()),
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::api::core::v1::Node;

    use super::*;
    use crate::api::EC2NodeClass;
    use crate::clock::Clock;
    use crate::controller::Settings;
    use crate::testing::{Env, World};

    #[test]
    fn orphans_past_the_grace_are_terminated_and_owned_or_young_ones_kept() {
        let Env {
            clock,
            cluster,
            cloud,
            mut controller,
            rt,
        } = World::new().env(Settings::default());
        let class = EC2NodeClass::test("default");
        let launch = |name: &str| {
            let claim = NodeClaim::test(name);
            rt.block_on(cloud.create(&claim, &class, &BTreeSet::new()))
                .expect("launches")
                .instance
        };
        // An instance whose NodeClaim recorded it, and one whose did not.
        let owned = launch("owned");
        let mut claim = NodeClaim::test("owned");
        claim
            .status
            .get_or_insert_with(Default::default)
            .provider_id = Some(owned.provider_id.clone());
        cluster.create(claim).expect("created");
        let orphan = launch("crashed");

        clock.advance(Duration::from_secs(60)).expect("forward");
        let young = launch("young");
        // Within the grace nothing is collected; the next run is due at the
        // interval, or when the first orphan's grace ends if that is sooner.
        let next = rt.block_on(controller.reconcile_garbage());
        assert_eq!(
            next,
            GC_INTERVAL.min(ORPHAN_GRACE - Duration::from_secs(60))
        );
        assert_eq!(rt.block_on(cloud.list()).expect("lists").len(), 3);

        clock
            .advance(ORPHAN_GRACE - Duration::from_secs(60))
            .expect("forward");
        let next = rt.block_on(controller.reconcile_garbage());
        let left: Vec<String> = rt
            .block_on(cloud.list())
            .expect("lists")
            .iter()
            .map(|i| i.id.clone())
            .collect();
        assert_eq!(left, [owned.id.clone(), young.id.clone()]);
        assert_eq!(next, Duration::from_secs(60));
        let events = controller.drain_events();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "GarbageCollected");
        assert_eq!(events[0].object, format!("Instance/{}", orphan.provider_id));
        assert!(
            events[0].message.contains("\"crashed\""),
            "{}",
            events[0].message
        );
    }

    /// Karpenter's garbage-collection suite: one NodeClaim with an
    /// instance, `registered` or not, and its Node (`ready`, not ready, or
    /// none); the instance terminated outside dovetail; whether the
    /// collector deletes the NodeClaim.
    fn collects(registered: bool, node: Option<bool>, claims: usize) -> usize {
        let Env {
            clock,
            cluster,
            cloud,
            mut controller,
            rt,
        } = World::new().env(Settings::default());
        for n in 0..claims {
            let name = format!("reclaimed-{n}");
            let mut claim = NodeClaim::test(&name);
            let instance = rt
                .block_on(cloud.create(&claim, &EC2NodeClass::test("default"), &BTreeSet::new()))
                .expect("launches")
                .instance;
            let status = claim.status.get_or_insert_with(Default::default);
            status.provider_id = Some(instance.provider_id.clone());
            if registered {
                let conds = status.conditions.get_or_insert_with(Vec::new);
                crate::controller::set_condition(
                    conds,
                    conditions::REGISTERED,
                    true,
                    "Registered",
                    "",
                    clock.now(),
                );
            }
            cluster.create(claim).expect("created");
            if let Some(ready) = node {
                let node: Node = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name},
                    "spec": {"providerID": instance.provider_id},
                    "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
                }))
                .expect("node");
                cluster.create(node).expect("created");
            }
            cloud
                .terminate_externally(&instance.id, "terminated outside dovetail")
                .expect("terminated");
        }
        clock.advance(Duration::from_secs(20)).expect("forward");
        rt.block_on(controller.reconcile_garbage());
        let left = Cluster::list::<NodeClaim>(cluster.as_ref()).len();
        let gone = controller
            .drain_events()
            .iter()
            .filter(|e| e.reason == "InstanceGone")
            .count();
        assert_eq!(claims - left, gone);
        gone
    }

    #[test]
    fn should_delete_the_nodeclaim_when_the_node_is_there_in_a_not_ready_state_and_the_instance_is_gone()
     {
        assert_eq!(collects(true, Some(false), 1), 1);
    }

    #[test]
    fn shouldnt_delete_the_nodeclaim_when_the_node_is_there_in_a_ready_state_and_the_instance_is_gone()
     {
        assert_eq!(collects(true, Some(true), 1), 0);
    }

    #[test]
    fn should_delete_many_nodeclaims_when_the_nodes_are_there_in_a_not_ready_state_and_the_instances_are_gone()
     {
        assert_eq!(collects(true, Some(false), 25), 25);
    }

    #[test]
    fn shouldnt_delete_the_nodeclaim_when_the_node_isnt_there_and_the_instance_is_gone() {
        // Not registered: the registration timeout's, not the collector's.
        assert_eq!(collects(false, None, 1), 0);
        // Registered, and its Node is gone too: nothing vouches for it.
        assert_eq!(collects(true, None, 1), 1);
    }

    #[test]
    fn a_registered_nodeclaim_launched_a_moment_ago_but_not_yet_listed_is_kept() {
        // DescribeInstances lags a launch: an unregistered claim whose
        // instance the list does not show yet is never collected.
        assert_eq!(collects(false, Some(false), 3), 0);
    }

    /// A NodeClaim `crashed` whose instance (`first`) was launched by a
    /// controller that stopped before writing its status, and a new
    /// controller.
    struct Crashed {
        env: Env,
        first: crate::cloud::Instance,
    }

    fn crashed() -> Crashed {
        let env = World::new().env(Settings::default());
        let Env {
            cluster, cloud, rt, ..
        } = &env;
        let class = EC2NodeClass::test("default");
        cluster.create(class.clone()).expect("created");
        let claim = NodeClaim::test("crashed");
        cluster.create(claim.clone()).expect("created");
        let first = rt
            .block_on(cloud.create(&claim, &class, &BTreeSet::new()))
            .expect("launches")
            .instance;
        Crashed { env, first }
    }

    /// A controller stopped between a launch and the NodeClaim status that
    /// records it: the next controller records the instance it finds
    /// instead of launching a second one.
    #[test]
    fn a_launch_whose_status_was_never_written_is_recorded_not_repeated() {
        let Crashed {
            env:
                Env {
                    cluster,
                    cloud,
                    rt,
                    mut controller,
                    ..
                },
            first,
        } = crashed();
        rt.block_on(controller.reconcile_nodeclaims());
        let stored = cluster
            .get::<NodeClaim>(&crate::cluster::ObjectKey::cluster("crashed"))
            .expect("kept");
        let status = stored.status.as_ref().expect("status written");
        assert_eq!(
            status.provider_id.as_deref(),
            Some(first.provider_id.as_str())
        );
        let ids: Vec<String> = rt
            .block_on(cloud.list())
            .expect("lists")
            .iter()
            .map(|i| i.id.clone())
            .collect();
        assert_eq!(
            ids,
            std::slice::from_ref(&first.id),
            "launched a second instance"
        );
        let reasons: Vec<String> = controller
            .drain_events()
            .into_iter()
            .map(|e| e.reason)
            .collect();
        assert!(
            reasons.iter().any(|r| r == "LaunchRecovered"),
            "{reasons:?}"
        );
    }

    /// A new controller that cannot list the instances cannot tell whether
    /// a NodeClaim's instance was launched already: it waits (LaunchFailed,
    /// tried again after the backoff) instead of launching a second one,
    /// and records the instance once the list answers.
    #[test]
    fn a_launch_waits_while_the_instances_cannot_be_listed() {
        let Crashed {
            env:
                Env {
                    clock,
                    cluster,
                    cloud,
                    rt,
                    mut controller,
                },
            first,
        } = crashed();
        let creates = || {
            cloud
                .calls()
                .iter()
                .filter(|c| matches!(c.call, crate::world::ec2::Call::Create { .. }))
                .count()
        };
        let provider_id = || {
            cluster
                .get::<NodeClaim>(&crate::cluster::ObjectKey::cluster("crashed"))
                .expect("kept")
                .status
                .as_ref()
                .and_then(|s| s.provider_id.clone())
        };

        cloud.fail_next(CloudError::Api("RequestLimitExceeded".into()));
        let wait = rt.block_on(controller.reconcile_nodeclaims());
        assert_eq!(creates(), 1, "launched while the list failed");
        assert_eq!(provider_id(), None);
        // The claim says why it waits.
        let stored = cluster
            .get::<NodeClaim>(&crate::cluster::ObjectKey::cluster("crashed"))
            .expect("kept");
        let launched = stored
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == conditions::LAUNCHED))
            .expect("a Launched condition");
        assert_eq!(launched.status, crate::api::ConditionStatus::Unknown);
        assert_eq!(launched.reason.as_deref(), Some("LaunchFailed"));
        let message = launched.message.as_deref().unwrap_or_default();
        assert!(
            message.contains("cannot tell whether an instance was already launched"),
            "{message}"
        );
        assert!(wait < Duration::from_secs(60), "tried again after {wait:?}");

        clock.advance(wait).expect("advances");
        rt.block_on(controller.reconcile_nodeclaims());
        assert_eq!(creates(), 1, "launched a second instance");
        assert_eq!(provider_id(), Some(first.provider_id.clone()));
    }
}
