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
//! counting as capacity.

use std::collections::HashSet;
use std::time::Duration;

use super::Controller;
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
        let claims = self.cluster.list::<NodeClaim>();
        let owned: HashSet<&str> = claims
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
        let live: HashSet<&str> = instances
            .iter()
            .filter(|i| !matches!(i.state, InstanceState::Terminated))
            .map(|i| i.provider_id.as_str())
            .collect();
        let gone: Vec<std::sync::Arc<NodeClaim>> = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|p| !live.contains(p))
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
    use std::sync::Arc;

    use super::*;
    use crate::api::EC2NodeClass;
    use crate::clock::{Clock, ManualClock, Timestamp};
    use crate::cloud::sim::{SimConfig, SimEc2};
    use crate::cluster::MemoryCluster;
    use crate::controller::Settings;

    #[test]
    fn orphans_past_the_grace_are_terminated_and_owned_or_young_ones_kept() {
        let clock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
        let catalog = SimEc2::builtin_catalog().expect("built-in catalog");
        let cloud = Arc::new(SimEc2::new(SimConfig::new(catalog), dyn_clock.clone()));
        let class = EC2NodeClass::test("default");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
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

        let mut controller = Controller::new(
            cluster.clone(),
            cloud.clone(),
            dyn_clock.clone(),
            Settings::default(),
        );
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
            .into_iter()
            .map(|i| i.id)
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

    #[test]
    fn a_nodeclaim_whose_instance_is_gone_is_deleted() {
        let clock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
        let catalog = SimEc2::builtin_catalog().expect("built-in catalog");
        let cloud = Arc::new(SimEc2::new(SimConfig::new(catalog), dyn_clock.clone()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let mut claim = NodeClaim::test("reclaimed");
        let instance = rt
            .block_on(cloud.create(&claim, &EC2NodeClass::test("default"), &BTreeSet::new()))
            .expect("launches")
            .instance;
        claim
            .status
            .get_or_insert_with(Default::default)
            .provider_id = Some(instance.provider_id.clone());
        cluster.create(claim).expect("created");
        let mut controller = Controller::new(
            cluster.clone(),
            cloud.clone(),
            dyn_clock,
            Settings::default(),
        );
        rt.block_on(controller.reconcile_garbage());
        assert_eq!(Cluster::list::<NodeClaim>(cluster.as_ref()).len(), 1);
        cloud
            .terminate_externally(&instance.id, "spot reclaimed")
            .expect("terminated");
        rt.block_on(controller.reconcile_garbage());
        assert!(Cluster::list::<NodeClaim>(cluster.as_ref()).is_empty());
        let events = controller.drain_events();
        assert!(
            events.iter().any(|e| e.reason == "InstanceGone"),
            "{events:?}"
        );
    }

    /// A controller stopped between a launch and the NodeClaim status that
    /// records it: the next controller records the instance it finds
    /// instead of launching a second one.
    #[test]
    fn a_launch_whose_status_was_never_written_is_recorded_not_repeated() {
        let clock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
        let catalog = SimEc2::builtin_catalog().expect("built-in catalog");
        let cloud = Arc::new(SimEc2::new(SimConfig::new(catalog), dyn_clock.clone()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let class = EC2NodeClass::test("default");
        cluster.create(class.clone()).expect("created");
        let claim = NodeClaim::test("crashed");
        cluster.create(claim.clone()).expect("created");
        let first = rt
            .block_on(cloud.create(&claim, &class, &BTreeSet::new()))
            .expect("launches")
            .instance;

        let mut controller = Controller::new(
            cluster.clone(),
            cloud.clone(),
            dyn_clock.clone(),
            Settings::default(),
        );
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
            .into_iter()
            .map(|i| i.id)
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
}
