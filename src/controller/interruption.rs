//! Interruption in the controller: the [`MessageHandler`] that the SQS
//! poller and the simulated EC2 deliver EventBridge events to.
//!
//! For each message the controller finds the NodeClaims of the instances it
//! names in its provider-id index (instance id → NodeClaim, kept from the
//! NodeClaims' `status.providerID`; rebuilt only when a lookup misses and
//! the NodeClaims changed since it was built, never scanned per message),
//! asks the pure [`interruption::decide()`], and applies the actions in
//! order:
//! - an offering marked unavailable goes into the same cache as the
//!   offerings that failed with insufficient capacity, for the same TTL, so
//!   the provisioner and launches skip it;
//! - a NodeClaim to delete is marked as disrupted with reason `Interrupted`
//!   (the annotations and condition of `controller::disruption`), its node is
//!   tainted `karpenter.sh/disrupted:NoSchedule`, the decision is recorded
//!   (a `Disruption` event and a decision for the report), and it is
//!   deleted at once: termination drains it through evictions that respect
//!   PodDisruptionBudgets, then terminates the instance. No budget is
//!   consulted, and no replacement is waited for: the capacity is going
//!   away regardless. The provisioner counts the pods still on an
//!   interrupted node as pending (`controller::provisioner`), so their
//!   replacement capacity is launched at once, before they are evicted;
//! - anything else is recorded as an event.
//!
//! Handling is idempotent: a NodeClaim already being deleted is left as it
//! is, so a message delivered twice changes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use crate::api::NodeClaim;
use crate::clock::Timestamp;
use crate::cloud::CloudProvider;
use crate::cluster::{Cluster, ObjectKey};
use crate::disruption::Reason;
use crate::interruption::{
    self, Action, ClaimInfo, HandlerError, Message, MessageHandler, instance_id_of,
};

use super::Controller;

/// Instance id → the NodeClaim it backs, as of a NodeClaim revision.
#[derive(Debug, Default)]
pub struct ProviderIndex {
    /// The NodeClaims' revision the index was built at.
    revision: Option<u64>,
    by_instance: HashMap<String, ClaimInfo>,
    /// How many times it was built, for tests.
    builds: u64,
}

impl ProviderIndex {
    fn rebuild(&mut self, claims: &[Arc<NodeClaim>], revision: u64) {
        self.by_instance = claims
            .iter()
            .filter_map(|c| ClaimInfo::from_nodeclaim(c))
            .collect();
        self.revision = Some(revision);
        self.builds += 1;
    }

    /// Instances indexed.
    pub fn len(&self) -> usize {
        self.by_instance.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_instance.is_empty()
    }

    /// How many times the index was built from a list of NodeClaims.
    pub fn builds(&self) -> u64 {
        self.builds
    }
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// The NodeClaim an instance backs. A hit is checked against the stored
    /// NodeClaim (one keyed read); a miss rebuilds the index only when the
    /// NodeClaims changed since it was built.
    fn claim_for_instance(&mut self, instance_id: &str) -> Option<ClaimInfo> {
        let check = |cluster: &C, info: &ClaimInfo| {
            cluster
                .get::<NodeClaim>(&ObjectKey::cluster(info.name.as_str()))
                .is_some_and(|c| {
                    c.status
                        .as_ref()
                        .and_then(|s| s.provider_id.as_deref())
                        .and_then(instance_id_of)
                        == Some(instance_id)
                })
        };
        if let Some(info) = self.provider_index.by_instance.get(instance_id)
            && check(&self.cluster, info)
        {
            return Some(info.clone());
        }
        let revision = self.cluster.revision::<NodeClaim>();
        if self.provider_index.revision == Some(revision) {
            return None;
        }
        let claims = self.cluster.list::<NodeClaim>();
        self.provider_index.rebuild(&claims, revision);
        self.provider_index
            .by_instance
            .get(instance_id)
            .filter(|info| check(&self.cluster, info))
            .cloned()
    }

    /// The provider-id index (for tests and benchmarks).
    pub fn provider_index(&self) -> &ProviderIndex {
        &self.provider_index
    }

    /// Acts on one interruption message received at `received_at` (see the
    /// module documentation). Each NodeClaim marked for deletion is reported
    /// to the interruption metrics with the time it took.
    pub async fn handle_interruption(
        &mut self,
        message: &Message,
        received_at: Timestamp,
    ) -> Result<(), HandlerError> {
        let _timer = self
            .metrics
            .reconcile(super::metrics::controllers::INTERRUPTION);
        let mut claims: HashMap<String, ClaimInfo> = HashMap::new();
        for id in message.detail.instance_ids() {
            if !claims.contains_key(id)
                && let Some(info) = self.claim_for_instance(id)
            {
                claims.insert(id.clone(), info);
            }
        }
        let options = interruption::Options {
            rebalance_as_interruption: self.settings.rebalance_as_interruption,
        };
        let actions = interruption::decide(message, &|id: &str| claims.get(id).cloned(), &options);
        let mut failed = Vec::new();
        for action in actions {
            match action {
                Action::MarkUnavailable(offering) => {
                    let now = self.clock.now();
                    let until = now
                        .checked_add(self.settings.unavailable_offering_ttl)
                        .unwrap_or(now);
                    self.unavailable.mark(offering.clone(), until);
                    self.event(
                        format!(
                            "Offering/{}/{}/{}",
                            offering.instance_type, offering.zone, offering.capacity_type
                        ),
                        "OfferingUnavailable",
                        format!(
                            "{}: EC2 is reclaiming spot capacity; skipped for {}s",
                            message.kind(),
                            self.settings.unavailable_offering_ttl.as_secs()
                        ),
                    );
                }
                Action::DeleteNodeClaim {
                    name,
                    reason,
                    message: why,
                } => {
                    match self
                        .interrupt_claim(&name, reason, message.metric_kind(), why)
                        .await
                    {
                        Ok(true) => self
                            .interruption_metrics
                            .observe_marked(received_at, self.clock.now()),
                        // Already being deleted (a message delivered twice,
                        // or a second event for the same instance).
                        Ok(false) => {}
                        Err(e) => failed.push(e),
                    }
                }
                Action::Record {
                    object,
                    reason,
                    message,
                } => self.event(object, reason, message),
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(HandlerError::Failed(failed.join("; ")))
        }
    }

    /// Marks, taints, records and deletes one NodeClaim for an
    /// interruption; whether it did. A NodeClaim already gone or being
    /// deleted is left alone.
    async fn interrupt_claim(
        &mut self,
        name: &str,
        reason: &str,
        metric_reason: &str,
        why: String,
    ) -> Result<bool, String> {
        let Some(claim) = self.cluster.get::<NodeClaim>(&ObjectKey::cluster(name)) else {
            return Ok(false);
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Ok(false);
        }
        let reason = Reason::parse(reason).unwrap_or(Reason::Interrupted);
        let now = self.clock.now();
        let marked = self
            .mark(&claim, reason, &[], now)
            .await
            .unwrap_or_else(|| claim.clone());
        if let Some(node) = marked
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| {
                self.cluster
                    .get::<k8s_openapi::api::core::v1::Node>(&ObjectKey::cluster(n))
            })
        {
            super::taints::taint_disrupted(&*self.cluster, &node).await;
        }
        self.disruption_event(name, reason, why, Vec::new());
        self.decisions.push(super::Decision {
            t: now,
            reason: reason.as_str().into(),
            decision: "delete".into(),
            consolidation_type: String::new(),
            nodeclaims: vec![name.to_string()],
            replacements: Vec::new(),
            replacement_types: Vec::new(),
            savings_per_hour: 0.0,
        });
        self.finish_as(&marked, metric_reason).await;
        match self.cluster.get::<NodeClaim>(&ObjectKey::cluster(name)) {
            Some(c) if c.metadata.deletion_timestamp.is_none() => {
                Err(format!("NodeClaim {name} could not be deleted"))
            }
            _ => Ok(true),
        }
    }
}

/// The controller as a [`MessageHandler`]: messages are handled one at a
/// time, each with the controller to itself.
pub struct Handler<'a, C: Cluster, P: CloudProvider> {
    controller: Lock<'a, C, P>,
}

enum Lock<'a, C: Cluster, P: CloudProvider> {
    /// The controller lent for a delivery (the simulation).
    Lent(tokio::sync::Mutex<&'a mut Controller<C, P>>),
    /// The controller shared with its passes (`dovetail controller`).
    Shared(&'a tokio::sync::Mutex<Controller<C, P>>),
}

impl<'a, C: Cluster, P: CloudProvider> Handler<'a, C, P> {
    pub fn new(controller: &'a mut Controller<C, P>) -> Self {
        Handler {
            controller: Lock::Lent(tokio::sync::Mutex::new(controller)),
        }
    }

    /// A handler that takes the controller's lock for each message, between
    /// the passes that hold it too.
    pub fn shared(controller: &'a tokio::sync::Mutex<Controller<C, P>>) -> Self {
        Handler {
            controller: Lock::Shared(controller),
        }
    }
}

impl<C: Cluster, P: CloudProvider> MessageHandler for Handler<'_, C, P> {
    async fn handle(&self, message: Message, received_at: Timestamp) -> Result<(), HandlerError> {
        match &self.controller {
            Lock::Lent(lock) => {
                let mut controller = lock.lock().await;
                controller.handle_interruption(&message, received_at).await
            }
            Lock::Shared(lock) => {
                let mut controller = lock.lock().await;
                controller.handle_interruption(&message, received_at).await
            }
        }
    }
}
