//! Status conditions, and the one way the controller writes the status of
//! the objects it owns (NodeClaims, NodePools, EC2NodeClasses,
//! NodeOverlays, CapacityBuffers): a loop edits a copy, sets conditions
//! with [`set_condition`] (the transition time kept while the status
//! holds), and hands the copy to [`Controller::record_status`] only when
//! something changed. A refused write is handled one way everywhere:
//! - the object is gone (404): nothing to record;
//! - a conflict (409): the next pass reads the new version and writes
//!   again, as the reference requeues on a conflict;
//! - anything else: a `StatusNotRecorded` Warning Event on the object,
//!   deduplicated as the reference's recorder does, and the next pass
//!   writes again.
//!
//! Nothing is remembered as written until the write succeeds, so every
//! loop retries by itself.

use std::sync::Arc;

use super::Controller;
use crate::api::common::{Condition, ConditionStatus};
use crate::api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use crate::clock::Timestamp;
use crate::cloud::CloudProvider;
use crate::cluster::{ApiError, Cluster, Object};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A kind whose status carries conditions the controller sets.
pub(crate) trait Conditioned: Object {
    /// `status.conditions`, made if absent.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

macro_rules! conditioned {
    ($($kind:ty),*) => {$(
        impl Conditioned for $kind {
            fn conditions_mut(&mut self) -> &mut Vec<Condition> {
                self.status
                    .get_or_insert_with(Default::default)
                    .conditions
                    .get_or_insert_with(Vec::new)
            }
        }
    )*};
}

conditioned!(
    NodeClaim,
    NodePool,
    EC2NodeClass,
    NodeOverlay,
    CapacityBuffer
);

/// The object as Events name it: `Kind/name`, or `Kind/namespace/name`.
pub(super) fn event_object<K: Object>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{}/{ns}/{name}", K::kind(&())),
        None => format!("{}/{name}", K::kind(&())),
    }
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// Writes an object's status (see the module for what a refusal does);
    /// the stored object once written.
    pub(crate) async fn record_status<K: Object>(
        &mut self,
        updated: K,
    ) -> Result<Arc<K>, ApiError> {
        let object = event_object(&updated);
        let written = self.cluster.replace_status(updated).await;
        if let Err(e) = &written {
            self.status_refused(object, e);
        }
        written
    }

    /// Writes the statuses of several objects as [`Controller::record_status`]
    /// writes one, at most [`Settings::write_concurrency`] in flight at once
    /// (each write waits on the API server, not on this process); the
    /// answers in the order of `updated`.
    ///
    /// [`Settings::write_concurrency`]: super::Settings::write_concurrency
    pub(crate) async fn record_statuses<K: Object>(
        &mut self,
        updated: Vec<K>,
    ) -> Vec<Result<Arc<K>, ApiError>> {
        let cluster = Arc::clone(&self.cluster);
        let writes = updated.into_iter().map(|u| {
            let cluster = &cluster;
            async move {
                let object = event_object(&u);
                (object, cluster.replace_status(u).await)
            }
        });
        let answers = super::writes::concurrently(writes, self.settings.write_concurrency).await;
        answers
            .into_iter()
            .map(|(object, written)| {
                if let Err(e) = &written {
                    self.status_refused(object, e);
                }
                written
            })
            .collect()
    }

    /// What a refused status write leaves (see the module).
    pub(crate) fn status_refused(&mut self, object: String, e: &ApiError) {
        if e.is_not_found() || e.is_conflict() {
            tracing::debug!(%object, error = %e, "status written again next pass");
        } else {
            self.event_deduped(object, "StatusNotRecorded", e.to_string());
        }
    }

    /// Writes one condition of a NodeClaim (`lastTransitionTime` only on a
    /// change of status); `claim` becomes the stored version. Nothing is
    /// written when the condition already says so.
    pub(crate) async fn write_claim_condition(
        &mut self,
        claim: &mut Arc<NodeClaim>,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) {
        let now = self.clock.now();
        let mut updated = (**claim).clone();
        let conds = updated.conditions_mut();
        if set_condition_status(conds, type_, status, reason, message, now)
            && let Ok(stored) = self.record_status(updated).await
        {
            *claim = stored;
        }
    }
}

/// Sets a condition, keeping its transition time when the status does not
/// change. Returns whether anything changed.
pub(crate) fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    let status = if status {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    set_condition_status(conditions, type_, status, reason, message, now)
}

/// [`set_condition`] with any status, `Unknown` included.
pub(crate) fn set_condition_status(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        let same = c.status == status
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref().unwrap_or("") == message;
        if same {
            return false;
        }
        if c.status != status {
            c.last_transition_time = Time(now);
        }
        c.status = status;
        c.reason = Some(reason.to_string());
        c.message = Some(message.to_string());
        return true;
    }
    conditions.push(Condition {
        last_transition_time: Time(now),
        message: Some(message.to_string()),
        observed_generation: None,
        reason: Some(reason.to_string()),
        status,
        type_: type_.to_string(),
    });
    true
}

/// Removes a condition; whether there was one.
pub(crate) fn clear_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Whether a condition is true.
pub(crate) fn is_true(conditions: Option<&Vec<Condition>>, type_: &str) -> bool {
    crate::api::common::find_condition(conditions.map(Vec::as_slice), type_)
        .is_some_and(Condition::is_true)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::cluster::ObjectKey;
    use crate::controller::Settings;
    use crate::world::ec2::{SimConfig, SimEc2};
    use crate::world::{Fault, MemoryCluster, Write};

    fn controller() -> (Arc<MemoryCluster>, Controller<MemoryCluster, SimEc2>) {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let cluster = Arc::new(MemoryCluster::new(clock.clone()));
        let cloud = Arc::new(SimEc2::new(
            SimConfig::new(SimEc2::builtin_catalog().expect("catalog")),
            clock.clone(),
        ));
        cluster.create(NodeClaim::test("c")).expect("claim");
        let controller = Controller::new(cluster.clone(), cloud, clock, Settings::default());
        (cluster, controller)
    }

    fn with_ready(cluster: &MemoryCluster) -> NodeClaim {
        let mut claim =
            (*Cluster::get::<NodeClaim>(cluster, &ObjectKey::cluster("c")).unwrap()).clone();
        set_condition(
            claim.conditions_mut(),
            "Ready",
            true,
            "Ready",
            "",
            Timestamp::UNIX_EPOCH,
        );
        claim
    }

    fn refusals(controller: &mut Controller<MemoryCluster, SimEc2>) -> Vec<String> {
        controller
            .drain_events()
            .into_iter()
            .filter(|e| e.reason == "StatusNotRecorded")
            .map(|e| e.object)
            .collect()
    }

    /// One policy for every status write: a refusal is one Warning Event
    /// on the object (not repeated within the recorder's dedupe window), a
    /// conflict or a deleted object none; the write returns the stored
    /// object once it is accepted.
    #[tokio::test]
    async fn a_refused_status_write_is_one_event_and_a_conflict_none() {
        let (cluster, mut controller) = controller();
        let internal = || ApiError::Internal {
            message: "injected".into(),
        };
        cluster.inject(Fault::new(Write::ReplaceStatus, "NodeClaim", internal()).times(2));
        assert!(
            controller
                .record_status(with_ready(&cluster))
                .await
                .is_err()
        );
        assert!(
            controller
                .record_status(with_ready(&cluster))
                .await
                .is_err()
        );
        assert_eq!(refusals(&mut controller), ["NodeClaim/c"]);

        let conflict = ApiError::Conflict {
            resource: "nodeclaims".into(),
            key: ObjectKey::cluster("c"),
            message: "stale".into(),
        };
        cluster.inject(Fault::new(Write::ReplaceStatus, "NodeClaim", conflict));
        assert!(
            controller
                .record_status(with_ready(&cluster))
                .await
                .is_err()
        );
        assert!(refusals(&mut controller).is_empty());

        let stored = controller
            .record_status(with_ready(&cluster))
            .await
            .expect("written");
        assert!(is_true(
            stored.status.as_ref().and_then(|s| s.conditions.as_ref()),
            "Ready"
        ));
        assert!(refusals(&mut controller).is_empty());
    }
}
