//! What the controller does about an event: a pure function of the
//! message, the NodeClaims the instances back, and the options.
//!
//! The controller applies the actions in order: an offering is marked
//! unavailable before the NodeClaim on it is deleted, so the replacement
//! that the deletion starts is launched elsewhere.

use std::collections::HashSet;

use crate::api::{
    CAPACITY_TYPE_SPOT, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE, NodeClaim,
};
use crate::cloud::OfferingKey;

use super::message::{Detail, Message, is_instance_id};

/// The disruption reason of every deletion an event causes (the
/// vocabulary of `../shared/CONVENTIONS.md`).
pub const REASON_INTERRUPTED: &str = "Interrupted";
/// The reason of the event recorded for a rebalance recommendation that
/// disrupts nothing.
pub const REASON_REBALANCE_RECOMMENDATION: &str = "RebalanceRecommendation";
/// The reason of the event recorded for an instance no NodeClaim is backed by.
pub const REASON_INSTANCE_NOT_MANAGED: &str = "InstanceNotManaged";

/// The NodeClaim an instance backs, as the controller's provider-id index
/// knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimInfo {
    pub name: String,
    /// Empty when the NodeClaim does not say yet.
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
}

impl ClaimInfo {
    /// The instance id and what the index keeps for a launched NodeClaim:
    /// the id from `status.providerID` (`aws:///<zone>/<id>`), the offering
    /// from the labels the launch wrote (the zone from the provider id when
    /// the label is missing). `None` before the launch.
    pub fn from_nodeclaim(claim: &NodeClaim) -> Option<(String, ClaimInfo)> {
        let provider_id = claim.status.as_ref()?.provider_id.as_deref()?;
        let instance_id = instance_id_of(provider_id)?;
        let labels = claim.metadata.labels.as_ref();
        let label = |key: &str| labels.and_then(|l| l.get(key)).cloned();
        let zone = label(LABEL_ZONE)
            .or_else(|| zone_of(provider_id).map(str::to_string))
            .unwrap_or_default();
        Some((
            instance_id.to_string(),
            ClaimInfo {
                name: claim.metadata.name.clone().unwrap_or_default(),
                instance_type: label(LABEL_INSTANCE_TYPE).unwrap_or_default(),
                zone,
                capacity_type: label(LABEL_CAPACITY_TYPE).unwrap_or_default(),
            },
        ))
    }

    /// Its offering, when the NodeClaim names all three parts.
    pub fn offering(&self) -> Option<OfferingKey> {
        let parts = [&self.instance_type, &self.zone, &self.capacity_type];
        if parts.iter().any(|p| p.is_empty()) {
            return None;
        }
        Some(OfferingKey {
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            capacity_type: self.capacity_type.clone(),
        })
    }
}

/// The instance id of a provider id (`aws:///us-east-1a/i-0abc` →
/// `i-0abc`), when it has that form.
pub fn instance_id_of(provider_id: &str) -> Option<&str> {
    let id = provider_id.strip_prefix("aws://")?.rsplit('/').next()?;
    is_instance_id(id).then_some(id)
}

/// The zone of a provider id (`aws:///us-east-1a/i-0abc` → `us-east-1a`).
fn zone_of(provider_id: &str) -> Option<&str> {
    let mut parts = provider_id.strip_prefix("aws:///")?.split('/');
    let zone = parts.next().filter(|z| !z.is_empty())?;
    parts.next()?;
    Some(zone)
}

/// Finds the NodeClaim an EC2 instance backs. The controller answers from
/// its provider-id index; a closure `Fn(&str) -> Option<ClaimInfo>` is one.
pub trait ClaimLookup {
    fn claim_for_instance(&self, instance_id: &str) -> Option<ClaimInfo>;
}

impl<F: Fn(&str) -> Option<ClaimInfo>> ClaimLookup for F {
    fn claim_for_instance(&self, instance_id: &str) -> Option<ClaimInfo> {
        self(instance_id)
    }
}

/// How events are treated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Delete the NodeClaim on a rebalance recommendation, as on a spot
    /// interruption. Off by default: the recommendation is recorded and
    /// nothing is disrupted.
    pub rebalance_as_interruption: bool,
}

/// What the controller does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Skip this offering for new launches (the controller's unavailable-
    /// offerings cache): EC2 is reclaiming spot capacity there.
    MarkUnavailable(OfferingKey),
    /// Delete the NodeClaim through the termination path (taint, drain,
    /// terminate), starting its replacement at once, budgets aside.
    DeleteNodeClaim {
        name: String,
        reason: &'static str,
        message: String,
    },
    /// Record an event (`object` is `Kind/name`).
    Record {
        object: String,
        reason: &'static str,
        message: String,
    },
}

/// The actions for a message. Each instance the message names is looked
/// up once; an instance no NodeClaim is backed by is recorded and left
/// alone. Deterministic: the same inputs give the same actions in the
/// same order.
pub fn decide(message: &Message, claims: &impl ClaimLookup, options: &Options) -> Vec<Action> {
    let kind = message.kind();
    let mut actions = Vec::new();
    let mut seen = HashSet::new();
    for instance_id in message.detail.instance_ids() {
        if !seen.insert(instance_id.as_str()) {
            continue;
        }
        let Some(claim) = claims.claim_for_instance(instance_id) else {
            actions.push(Action::Record {
                object: format!("Instance/{instance_id}"),
                reason: REASON_INSTANCE_NOT_MANAGED,
                message: format!("{kind}: instance {instance_id} backs no NodeClaim; ignored"),
            });
            continue;
        };
        let delete = |message: String| Action::DeleteNodeClaim {
            name: claim.name.clone(),
            reason: REASON_INTERRUPTED,
            message,
        };
        match &message.detail {
            Detail::SpotInterruption { action, .. } => {
                if claim.capacity_type == CAPACITY_TYPE_SPOT
                    && let Some(offering) = claim.offering()
                {
                    actions.push(Action::MarkUnavailable(offering));
                }
                let action = action.as_deref().unwrap_or("reclaim");
                actions.push(delete(format!(
                    "{kind}: EC2 will {action} spot instance {instance_id}{}",
                    offering_text(&claim)
                )));
            }
            Detail::Rebalance { .. } if options.rebalance_as_interruption => {
                actions.push(delete(format!(
                    "{kind}: EC2 recommends rebalancing away from instance {instance_id}{}",
                    offering_text(&claim)
                )));
            }
            Detail::Rebalance { .. } => actions.push(Action::Record {
                object: format!("NodeClaim/{}", claim.name),
                reason: REASON_REBALANCE_RECOMMENDATION,
                message: format!(
                    "{kind}: EC2 recommends rebalancing away from instance {instance_id}{}; not disrupted (rebalance is not treated as an interruption)",
                    offering_text(&claim)
                ),
            }),
            Detail::ScheduledChange {
                event_type_code, ..
            } => {
                let code = event_type_code.as_deref().unwrap_or("scheduled change");
                actions.push(delete(format!(
                    "{kind}: AWS Health {code} for instance {instance_id}"
                )));
            }
            Detail::StateChange { state, .. } => {
                actions.push(delete(format!("{kind}: instance {instance_id} is {state}")));
            }
        }
    }
    actions
}

/// ` (c5.large, us-east-1a, spot)`, or nothing when unknown.
fn offering_text(claim: &ClaimInfo) -> String {
    let parts: Vec<&str> = [&claim.instance_type, &claim.zone, &claim.capacity_type]
        .into_iter()
        .map(String::as_str)
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}
